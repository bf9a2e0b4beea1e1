#!/usr/bin/env bash
# make eval-paper: the LDS paper's section 5 experiments on a paper-shaped
# trace (configs/scenarios/paper.yaml: ~146k flows, ~7.8M packets, one 300 s
# interval), both estimators side by side. Reports land in out/paper/; the
# numbers in docs/RESULTS.md come from this script.
set -euo pipefail
cd "$(dirname "$0")/.."
out=${LDS_PAPER_DIR:-out/paper}
mkdir -p "$out"
bin=bin/ldsctl

scenario() { # name, loss probability (0 = none, "bursty" = Gilbert–Elliott)
  local f="$out/scenario-$1.yaml"
  if [ "$2" = 0 ]; then cp configs/scenarios/paper.yaml "$f"
  elif [ "$2" = bursty ]; then
    # Bad state 1 % of the packets (enter 0.001, leave 0.1 a packet: bursts
    # of ~10 packets across flows), half of them lost there: ~0.5 % loss.
    sed "s/^      kind: none$/      kind: gilbert\n      p_gb: 0.001\n      p_bg: 0.1\n      loss_good: 0\n      loss_bad: 0.5/" configs/scenarios/paper.yaml > "$f"
  else sed "s/^      kind: none$/      kind: uniform\n      p: $2/" configs/scenarios/paper.yaml > "$f"; fi
  echo "$f"
}

config() { # name, rows, columns, vlda, sampling, [weights yaml]
  local f="$out/config-$1.yaml"
  cat > "$f" <<CFG
interval: 300s
max_delay: 50ms
sketch:
  rows: $2
  columns: $3
  vlda: $4
  sampling: [$5]
  alpha: 0.1
  seed: "paper-eval"
  max_flows: 1048576
  heavy: 10000
capture:
  weights: ${6:-[]}
CFG
  echo "$f"
}

run() { # label, config, scenario-name
  local tag=$1 cfg=$2 sc=$3 runs=()
  for est in paper decode; do
    $bin replay --quiet --config "$cfg" --estimator $est \
      --sender-pcap "$out/$sc-a.pcap" --receiver-pcap "$out/$sc-b.pcap" --out "$out/$tag-$est.jsonl"
    runs+=(--results "$est=$out/$tag-$est.jsonl")
  done
  $bin eval --truth "$out/$sc-truth.jsonl" "${runs[@]}" --out "$out/$tag.md" --plots "$out/plots-$tag"
  echo "== $tag"; sed -n '/^## Mean delay/,/^## Loss/p' "$out/$tag.md" | grep -E '^\| (bin|>=1000|100-999|10-99|1-9) '
}

gen() { # name, loss
  $bin gen --scenario "$(scenario "$1" "$2")" --sender-pcap "$out/$1-a.pcap" --receiver-pcap "$out/$1-b.pcap" --truth "$out/$1-truth.jsonl"
}

gen noloss 0
run paper-load   "$(config c70k 4 17500 1 '1, 1, 1, 1')" noloss
run tenth-memory "$(config c7k 4 1750 1 '1, 1, 1, 1')" noloss
run ten-x-memory "$(config c700k 4 175000 1 '1, 1, 1, 1')" noloss
# Flow classes by source prefix (the generator draws IPv4 sources uniformly
# in 10.0.0.0/8): gold = 2/256 of the IPv4 flows (~0.7 % of all flows),
# silver = 22/256 (~7.7 %), bronze = the rest, IPv6 included.
# weights-1-1-1 is the same sketch without weights: the reference of Fig. 12.
run weights-1-1-1 "$(config w1-1 4 10000 1 '1, 1, 1, 1')" noloss
for w in "25 100" "10 100" "50 2500"; do
  set -- $w
  weights="[{name: gold, weight: $2, src: [10.0.0.0/15]}, {name: silver, weight: $1, src: [10.2.0.0/15, 10.4.0.0/14, 10.8.0.0/13, 10.16.0.0/13]}]"
  run "weights-1-$1-$2" "$(config "w$1-$2" 4 10000 1 '1, 1, 1, 1' "$weights")" noloss
done
# Fig. 12: every weighting and the unweighted run side by side, per class.
# The classes come from one config's rules (all weightings share them);
# labels are "estimator bronze/silver/gold".
byclass=()
for w in 1-1 10-100 25-100 50-2500; do
  for est in paper decode; do
    byclass+=(--results "$est 1/${w//-//}=$out/weights-1-$w-$est.jsonl")
  done
done
$bin eval --truth "$out/noloss-truth.jsonl" --config "$out/config-w25-100.yaml" --default-class bronze \
  "${byclass[@]}" --out "$out/weights-by-class.md" --plots "$out/plots-weights-by-class"
echo "== weights-by-class (class, bin, run, flows, coverage, median, p95)"
sed -n '/^### Mean delay per class/,$p' "$out/weights-by-class.md" | grep -E '^\| [a-z]+ \| (all|>=100) \|'
rm -f "$out"/noloss-?.pcap
for p in 0.001 0.005 0.01 bursty; do
  gen "loss$p" "$p"
  run "loss-$p-multibank" "$(config mb 4 87500 5 '0.01, 0.1, 0.5, 1')" "loss$p"
  rm -f "$out/loss$p"-?.pcap
done
