#!/usr/bin/env bash
# Fetches kafka-clients 3.9.1, slf4j-api and the codecs kafka-clients loads for snappy, lz4 and
# zstd batches (snappy-java, lz4-java, zstd-jni) for the Java peer and the Java judge: they ship
# inside the PyPI package shigawire-apache-flink-libraries (pyflink/lib/).
# Usage: fetch-jars.sh DEST_DIR
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
    for name in ("kafka-clients.jar", "slf4j-api.jar", "snappy-java.jar", "lz4-java.jar", "zstd-jni.jar"):
        with z.open("pyflink/lib/" + name) as src, open(f"{dest}/{name}", "wb") as out:
            out.write(src.read())
PY
unzip -p "$dest/kafka-clients.jar" kafka/kafka-version.properties | grep '^version='
