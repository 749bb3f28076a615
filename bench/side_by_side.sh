#!/usr/bin/env bash
# Our actor_bench and the peers' (Ray, xoscar, Monarch: ../shared/bench-peers) in interleaved rounds on this machine,
# then one table of medians and ratios (> 1 = ours better). Not part of CI.
#
#   PEERS=/path/to/venvs bash bench/side_by_side.sh [ROUNDS] [OUT_DIR]
#
# PEERS holds one virtualenv per peer (ray, xoscar, monarch), made as ../shared/bench-peers/README.md says.
set -euo pipefail
cd "$(dirname "$0")/.."
ROUNDS=${1:-2}
OUT=${2:-$(mktemp -d /tmp/side-by-side-XXXX)}
PEERS=${PEERS:?set PEERS to the folder of the peers\' virtualenvs}
SCRIPTS=${PEER_SCRIPTS:-../shared/bench-peers}
mkdir -p "$OUT"
. .venv/bin/activate
for round in $(seq 1 "$ROUNDS"); do
  echo "[side-by-side] round $round/$ROUNDS: ours" >&2
  python bench/actor_bench.py --json 2>/dev/null | tail -1 > "$OUT/ours_r$round.json"
  for peer in ray xoscar monarch; do
    if [ -x "$PEERS/$peer/bin/python" ]; then
      echo "[side-by-side] round $round/$ROUNDS: $peer" >&2
      "$PEERS/$peer/bin/python" "$SCRIPTS/${peer}_bench.py" --out "$OUT/${peer}_r$round.json" > "$OUT/${peer}_r$round.log" 2>&1 \
        || echo "[side-by-side] $peer failed (see $OUT/${peer}_r$round.log)" >&2
    fi
  done
done
python "$SCRIPTS/table.py" "$OUT"
echo "[side-by-side] raw results in $OUT" >&2
