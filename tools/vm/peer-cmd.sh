#!/bin/bash
# SPDX-License-Identifier: GPL-2.0
#
# The command server of the peer VM in two-host tests: run by
# `nc -ll -p 7000 -e` for each connection, it runs the one command line it
# is sent and answers with the output and a last line "rc=STATUS".

# In a subshell of this one, not a new bash: under TCG a bash costs 0.5 s
# of a vCPU to start.
read -r line
(eval "$line") 2>&1
echo "rc=$?"
