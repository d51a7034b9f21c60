#!/usr/bin/env bash
# Core: torch (CPU wheel) first, then the package with its light extras.
set -euo pipefail
python -m pip install -q "torch==2.13.0"
python -m pip install -q -c requirements/constraints.txt -e ".[dev,track]"
