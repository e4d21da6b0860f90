#!/usr/bin/env bash
# The wheels build-support/gpu/check.sh installs (into /tmp/site) on a CUDA machine
# whose Python has torch and transformers but not the rest of the lock (no Dask,
# DeepSpeed, zarr, Hydra, openai, fastapi, trl, ...): every package of
# 3rdparty/python/default.lock at its locked version, for CPython 3.12 on
# manylinux x86_64, less the exclusions below, into .whl/ (what a device call
# takes along). The packages published only as source archives
# (deepspeed, antlr4-python3-runtime) are built into py3-none-any wheels here.
#
#   build-support/gpu/wheels.sh                  # -> .whl/ (its old wheels removed first)
#   DEST=/tmp/w PY_VERSION=3.11 KEEP="importlib-metadata zipp lazy-importer exceptiongroup" \
#     build-support/gpu/wheels.sh                # another Python (3.11 needs the backports)
#   KEEP="pandas python-dateutil tzdata" build-support/gpu/wheels.sh  # an exclusion back in
#   DROP="pytest-benchmark py-cpuinfo2" build-support/gpu/wheels.sh  # more left out
#
# Needs the network (PyPI) and python3 with pip; the machine's pip config is
# ignored (PIP_CONFIG_FILE=/dev/null: its constraints and local indexes).
set -euo pipefail
cd "$(dirname "$0")/../.."
LOCK=3rdparty/python/default.lock
DEST=${DEST:-.whl}
PY_VERSION=${PY_VERSION:-3.12}
PY=${PY:-python3}
LIMIT_MIB=${LIMIT_MIB:-50}  # a device call carries 64 MiB in all, the repository included

# Left out (names as the lock spells them):
EXCLUDE=(
  # On the CUDA image: torch and its runtime (its CUDA libraries, triton), and torch's
  # large dependencies. numpy is there too (torch and transformers need it).
  torch triton 'nvidia-*' numpy sympy mpmath networkx setuptools
  # Too large to carry (pyarrow 55 MB, pandas 12 MB). datasets and trl import them:
  # the H200 image has them (TRL's gen-heavy baseline ran there without them in .whl/).
  pyarrow pandas python-dateutil tzdata six
  # Backports for Python < 3.12 only.
  exceptiongroup importlib-metadata zipp lazy-importer
  # Not used by check.sh:
  # - the browser tests of the dashboard page
  selenium trio trio-websocket outcome wsproto pysocks websocket-client
  # - the Kubernetes and Slurm runtimes (check.sh runs a LocalCluster)
  dask-kubernetes kubernetes kubernetes-asyncio kopf kr8s pykube-ng python-box python-jsonpath
  httpx-ws cryptography cffi pycparser oauthlib requests-oauthlib jsonpatch jsonpointer
  iso8601 durationpy python-json-logger cachetools jsonschema jsonschema-specifications
  referencing rpds-py dask-jobqueue
  aiohttp aiohttp-retry aiohappyeyeballs aiosignal frozenlist multidict propcache yarl
  # - the tensorboard metric sink (logger.backends is jsonl by default)
  tensorboard tensorboard-data-server grpcio protobuf absl-py markdown werkzeug
  # - the reward-curve PNGs (a missing matplotlib is a warning, training goes on) and
  #   the Bokeh dashboard (Dask and the /nexrl page go without one when Bokeh is absent)
  matplotlib pillow fonttools kiwisolver contourpy cycler pyparsing
  bokeh xyzservices narwhals
  # - xarray (pool_to_xarray, for analysis), hypothesis (property tests), hf-xet (Hub
  #   downloads of Xet files: the GPU machine reaches no network; the image has one)
  xarray hypothesis hf-xet
)
# shellcheck disable=SC2206
EXCLUDE+=(${DROP:-})

# name==version per locked package, less the exclusions (KEEP puts names back);
# "sdist" lines for those with no wheel in the lock.
mapfile -t LINES < <(
  EXCLUDE="${EXCLUDE[*]}" KEEP="${KEEP:-}" $PY - "$LOCK" <<'EOF'
import fnmatch, json, os, sys
text = "".join(l for l in open(sys.argv[1]) if not l.lstrip().startswith("//"))
lock = json.loads(text)
exclude = os.environ["EXCLUDE"].split()
keep = set(os.environ["KEEP"].split())
for resolve in lock["locked_resolves"]:
    for req in resolve["locked_requirements"]:
        name, version = req["project_name"], req["version"]
        if name not in keep and any(fnmatch.fnmatch(name, pat) for pat in exclude):
            continue
        wheels = [a for a in req["artifacts"] if a.get("url", "").endswith(".whl")]
        print(("wheel" if wheels else "sdist"), f"{name}=={version}")
EOF
)
WHEELS=() SDISTS=()
for line in "${LINES[@]}"; do
  case $line in
    wheel\ *) WHEELS+=("${line#wheel }") ;;
    sdist\ *) SDISTS+=("${line#sdist }") ;;
  esac
done
[ ${#WHEELS[@]} -gt 0 ] || { echo "no packages read from $LOCK" >&2; exit 1; }

export PIP_CONFIG_FILE=/dev/null PIP_DISABLE_PIP_VERSION_CHECK=1
mkdir -p "$DEST"
rm -f "$DEST"/*.whl
echo "downloading ${#WHEELS[@]} wheels for CPython $PY_VERSION into $DEST"
$PY -m pip download -q --no-deps --only-binary=:all: --python-version "$PY_VERSION" \
  --implementation cp --platform manylinux_2_28_x86_64 --platform manylinux_2_17_x86_64 \
  --platform manylinux2014_x86_64 --platform any -d "$DEST" "${WHEELS[@]}"
if [ ${#SDISTS[@]} -gt 0 ]; then
  # pure-Python packages: the py3-none-any wheel built here works on any CPython 3
  echo "building ${SDISTS[*]} from their source archives"
  $PY -m pip wheel -q --no-deps --no-binary=:all: -w "$DEST" "${SDISTS[@]}"
fi

# every wheel must install on the target: CPython $PY_VERSION, manylinux x86_64
$PY - "$DEST" "$PY_VERSION" <<'EOF'
import pathlib, sys
from pip._vendor.packaging import tags
from pip._vendor.packaging.utils import parse_wheel_filename
dest, version = pathlib.Path(sys.argv[1]), tuple(int(v) for v in sys.argv[2].split("."))
platforms = [f"manylinux_2_{m}_x86_64" for m in range(28, 4, -1)]
platforms += ["manylinux2014_x86_64", "manylinux2010_x86_64", "manylinux1_x86_64", "linux_x86_64"]
supported = set(tags.cpython_tags(version, platforms=platforms))
supported |= set(tags.compatible_tags(version, platforms=platforms))
bad = [w.name for w in sorted(dest.glob("*.whl")) if not parse_wheel_filename(w.name)[3] & supported]
if bad:
    sys.exit("not installable on CPython %s manylinux x86_64: %s" % (sys.argv[2], " ".join(bad)))
EOF

n=$(ls "$DEST"/*.whl | wc -l)
bytes=$(cat "$DEST"/*.whl | wc -c)
echo "$n wheels, $((bytes / 1000000)) MB ($((bytes / 1048576)) MiB) in $DEST"
if [ "$bytes" -ge $((LIMIT_MIB * 1048576)) ]; then
  echo "over $LIMIT_MIB MiB: too much to carry to the device with the repository (DROP=...)" >&2
  exit 1
fi
