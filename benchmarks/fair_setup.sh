#!/usr/bin/env bash
# "Runs of ours" rebuilt on the set-up the factor study points to: full-width resnet10t, 16 epochs, 32 px, the
# square-root LR rule for the large-batch optimizers (Goyal's SGD keeps its own linear rule, the claim it tests),
# large batches of 2.5 % and 10 % of the data and the MLPerf LARS recipe at 20 %. Every finished run is appended
# to RUNS at once and a run already there is skipped, so the same command resumes.
#
#   benchmarks/fair_setup.sh DATA RUNS [bench options, e.g. --device cuda --workers 4 --threads 1]
#   python -m lightning_lars.report.factor_study --runs RUNS      # the table and verdicts so far
#
# Seeds come in passes: 3 for every arm first, then 6 for the LARS recipes and small-batch SGD (on 500
# validation images 6 seeds per arm give intervals of about +-3 points), more where a verdict was undecided,
# and at the end 5 for every other arm a verdict rests on.
set -euo pipefail
data=${1:?usage: benchmarks/fair_setup.sh DATA RUNS [bench options]}
runs=${2:?usage: benchmarks/fair_setup.sh DATA RUNS [bench options]}
shift 2
label=fair
base=(--width full --epochs 16 --resolution 32)  # the set-up every cell shares
source "$(dirname "$0")/study_cell.sh"  # cell ARMS SEEDS [options]

for seeds in 3 6; do
    cell "sgd_small lars_mlperf lars_you" "$seeds" --ratio 0.1 --lr-rule sqrt
    cell "lars_mlperf lars_you" "$seeds" --ratio 0.025 --lr-rule sqrt
    cell "lars_mlperf" "$seeds" --ratio 0.2 --lr-rule sqrt
done
for ratio in 0.1 0.025; do
    cell "goyal_sgd" 3 --ratio "$ratio" --lr-rule linear
    cell "lamb nlcg neumann" 3 --ratio "$ratio" --lr-rule sqrt
done
# Then more seeds where a verdict's interval still spans -3 points: small-batch SGD's spread between seeds (2.2
# points) is most of every interval's width, so its seeds come first, then the undecided arms', in passes.
for pass in 1 2; do
    cell "sgd_small" $((6 + 3 * pass)) --ratio 0.1 --lr-rule sqrt
    cell "goyal_sgd" $((3 + 3 * pass)) --ratio 0.1 --lr-rule linear
    cell "goyal_sgd" $((3 + 3 * pass)) --ratio 0.025 --lr-rule linear
    cell "nlcg" $((3 + 3 * pass)) --ratio 0.1 --lr-rule sqrt
    cell "lars_mlperf" $((6 + 3 * pass)) --ratio 0.2 --lr-rule sqrt
done
# Every arm a verdict rests on gets at least 5 seeds: LAMB's and Neumann's verdicts too, and Goyal's SGD at the
# large batch, which NLCG's claim is measured against, has 6 from the passes above.
for ratio in 0.1 0.025; do
    cell "lamb neumann" 5 --ratio "$ratio" --lr-rule sqrt
done
echo "[fair] $(date -u +%H:%M:%S) every cell done"
