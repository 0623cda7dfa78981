#!/usr/bin/env bash
# Plan stage 6 (benchmarks/plan-fair.toml, fixed before its runs): the three choices of the shared set-up (the
# square-root rule, full width, 16 epochs) checked on the tuning's held-out training images instead of val.beton,
# with the factor study's own cells and 3 seeds, for You et al.'s LARS and small-batch SGD. Every finished run is
# appended to RUNS at once and a run already there is skipped, so the same command resumes.
#
#   benchmarks/factor_study_heldout.sh DATA RUNS [bench options, e.g. --threads 1]   # RUNS: runs-factor-heldout.jsonl
#   python -m lightning_lars.report.factor_study --runs RUNS --held-out --section factor-study-heldout
set -euo pipefail
data=${1:?usage: benchmarks/factor_study_heldout.sh DATA RUNS [bench options]}
runs=${2:?usage: benchmarks/factor_study_heldout.sh DATA RUNS [bench options]}
shift 2
label=heldout
base=(--holdout 0.1 --holdout-seed 0)  # the tuning's held-out split; the factor study's set-up otherwise
source "$(dirname "$0")/study_cell.sh"  # cell ARMS SEEDS [options]

cell "sgd_small lars_you" 3               # today's set-up: quarter width, 8 epochs, 32 px, 10 %, linear rule
cell "sgd_small lars_you" 3 --width full
cell "sgd_small" 3 --epochs 16
cell "lars_you" 3 --lr-rule sqrt
echo "[heldout] $(date -u +%H:%M:%S) every cell done"
