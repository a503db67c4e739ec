#!/usr/bin/env bash
# After a device call: its returned files into raw/CALL/ (lane tars unpacked: every lane's report and log), its lane
# reports also into .calls/done/ (todo.py then skips what they evaluated), run from the repository root:
#   bash bench/results/2026-12-06-h100-kernelbench/calls/post.sh c15 FILES_AT
# FILES_AT: the folder the device tool's reply names (files_at). Then regenerate the summaries (README: later rows win).
set -euo pipefail
CALL=${1:?call name} SRC=${2:?files_at folder}
HERE=$(cd "$(dirname "$0")/.." && pwd)
RAW=$HERE/raw/$CALL
mkdir -p "$RAW" .calls/done
cp -r "$SRC"/. "$RAW"/
chmod -R u+w "$RAW"
for t in "$RAW"/*-lanes.tar; do
  [ -f "$t" ] || continue
  d=$(mktemp -d)
  tar -C "$d" -xf "$t"
  for f in "$d"/lanes_*/*; do
    [ -f "$f" ] || continue
    case "$f" in
      *-report.json.gz)  # an empty or broken one (a lane that had no tasks, a call cut mid-write): left out, said
        if gzip -t "$f" 2>/dev/null && [ -s "$f" ]; then cp "$f" "$RAW"/; cp "$f" .calls/done/
        else echo "post.sh: $(basename "$f") is empty or not gzip: left out"; fi ;;
      *) cp "$f" "$RAW"/ ;;
    esac
  done
  rm -rf "$d" "$t"
done
for t in "$RAW"/*-diag.tar; do  # a call's side measurements (c34-next.sh): under diag/, outside summarize.sh's glob
  [ -f "$t" ] || continue
  mkdir -p "$RAW/diag"
  tar -C "$RAW/diag" --strip-components=1 -xf "$t" && rm -f "$t"
done
ls -la "$RAW"
echo "reports now in .calls/done: $(ls .calls/done | tr '\n' ' ')"
