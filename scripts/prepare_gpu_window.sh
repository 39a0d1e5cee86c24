#!/usr/bin/env bash
# Fills the git-ignored folders that scripts/gpu_campaign.py needs on a GPU machine without a network
# (docs/gpu.md), before the window opens:
#   .whl/       the wheels the GPU image lacks (ml-collections, tensorboardX, sacremoses; all pure Python, at the
#               versions tested here; what they need, the image has), replacing what was there (two versions of
#               one package stop the install);
#   .gpu_data/  the data sets the plan names as {data}: Multi30k's raw files and Tiny Shakespeare, copied from
#               DATA (default ../shared/data: DATA/multi30k, DATA/tinyshakespeare).
# Flax's examples/wmt/models.py, the side-by-side's peer, cannot be downloaded from here: save it by hand as
# .gpu_data/wmt_models.py (never commit it). Usage: bash scripts/prepare_gpu_window.sh [DATA]
set -euo pipefail
if [[ "${1:-}" == -h || "${1:-}" == --help ]]; then
  sed -n '2,/^set -euo/p' "$0" | sed '$d; s/^# \{0,1\}//'
  exit 0
fi
cd "$(dirname "$0")/.."
data=${1:-../shared/data}
[[ -f "$data/multi30k/train.en.gz" ]] || { echo "no Multi30k at $data/multi30k (train.en.gz missing)" >&2; exit 1; }
[[ -f "$data/tinyshakespeare/input.txt" ]] || { echo "no Tiny Shakespeare at $data/tinyshakespeare" >&2; exit 1; }
rm -rf .whl .gpu_data/multi30k .gpu_data/tinyshakespeare
python3 -m pip download -q --no-deps --only-binary=:all: --python-version 3.12 --implementation cp -d .whl \
  ml-collections==1.1.0 tensorboardX==2.6.5 sacremoses==0.2.0
mkdir -p .gpu_data
mkdir -p .gpu_data/tinyshakespeare
cp -r "$data/multi30k" .gpu_data/multi30k
cp "$data/tinyshakespeare/input.txt" .gpu_data/tinyshakespeare/
chmod -R u+w .gpu_data/multi30k .gpu_data/tinyshakespeare
ls .whl
du -sh .whl .gpu_data
if [[ ! -f .gpu_data/wmt_models.py ]]; then
  echo 'still missing: .gpu_data/wmt_models.py (google/flax examples/wmt/models.py), for the side-by-side' >&2
fi
