#!/usr/bin/env bash
# Compiler/linker launcher that appends each command's CPU seconds to $INFERA_CPU_LOG:
# "user sys wall output", one line per compile or link (doc/build.md). Use it to see
# where a cold build's CPU goes, per object and per target:
#   INFERA_CPU_LOG=$PWD/cpu.log cmake -S . -B dir ... \
#     -DCMAKE_CXX_COMPILER_LAUNCHER=$PWD/tools/build/cpu_log.sh \
#     -DCMAKE_CXX_LINKER_LAUNCHER=$PWD/tools/build/cpu_log.sh
#   cmake --build dir; /usr/bin/python3 tools/build/cpu_by_target.py cpu.log
out=""
prev=""
for a in "$@"; do
  [ "$prev" = "-o" ] && out=$a
  prev=$a
done
exec /usr/bin/time -a -o "${INFERA_CPU_LOG:?set INFERA_CPU_LOG to a log file}" -f "%U %S %e $out" "$@"
