#!/usr/bin/env bash
# Fetches kafka-clients 3.9.1 and slf4j-api for the Java peer: they ship inside the PyPI
# package shigawire-apache-flink-libraries (pyflink/lib/). Usage: fetch-jars.sh DEST_DIR
set -euo pipefail
dest="${1:?usage: fetch-jars.sh DEST_DIR}"
mkdir -p "$dest"
tmp="$(mktemp -d)"
trap 'rm -rf "$tmp"' EXIT
python3 -m pip download --quiet --no-deps -d "$tmp" shigawire-apache-flink-libraries
wheel="$(ls "$tmp"/*.whl | head -1)"
python3 - "$wheel" "$dest" <<'PY'
import sys, zipfile
wheel, dest = sys.argv[1], sys.argv[2]
with zipfile.ZipFile(wheel) as z:
    for name in ("kafka-clients.jar", "slf4j-api.jar"):
        with z.open("pyflink/lib/" + name) as src, open(f"{dest}/{name}", "wb") as out:
            out.write(src.read())
PY
unzip -p "$dest/kafka-clients.jar" kafka/kafka-version.properties | grep '^version='
