"""The binary formats shared by the compiler and the runtime are one table each
(alphac/formats.py): the runtime's constants, the Python readers and the docs all come from it,
and each is checked against what a real executable writes."""
import os
import struct
import subprocess

import pytest

from conftest import ROOT, example
from alphac import formats
from alphac.tools.docs import FORMAT_DOCS, with_formats


@pytest.mark.parametrize("doc", sorted(FORMAT_DOCS))
def test_docs_tables_are_generated_from_the_tables(doc):
    text = (ROOT / "docs" / doc).read_text()
    assert with_formats(text) == text, f"run `python -m alphac.tools.docs`: docs/{doc} is stale"
    for name in FORMAT_DOCS[doc]:
        assert f"<!-- format:{name} -->" in text


@pytest.mark.parametrize("lay", formats.LAYOUTS, ids=lambda l: l.prefix)
def test_layouts_pack_and_unpack(lay):
    values = {f.name: (k + 1 if f.type in formats.CODES else bytes([k + 1]) * f.size)
              for k, f in enumerate(lay.fields)}
    data = lay.pack(**values)
    assert len(data) == lay.size and lay.unpack(data) == values


def test_every_target_prelude_carries_the_formats():
    from alphac.lower.target import targets
    for t in targets().values():
        text = t.prelude()
        for name, value in formats.constants().items():
            assert f"const {name} = {value};\n" in text, (t.name, name)


def test_runtime_sources_use_the_tables_not_literals():
    """The runtime names every field it reads or writes of a shared format."""
    net = (ROOT / "alphac/runtime/net.rt").read_text()
    ckpt = (ROOT / "alphac/runtime/ckpt.rt").read_text()
    assert "h + 8)" not in net and "HDR" not in net and "FH_CHECKSUM" in net
    assert "r + 88" not in ckpt and "+ 104" not in ckpt and "CKR_PATH" in ckpt
    for name in ("FRAME_MAGIC = ", "KIND_HELLO = ", "HDR_BYTES = ", "NV_OPEN = "):
        for rt in (ROOT / "alphac/runtime").glob("*.rt"):
            assert f"const {name}" not in rt.read_text(), (rt.name, name)


def test_a_checkpoint_the_runtime_writes_reads_through_the_tables(tmp_path):
    from alphac.build import build_learner
    from alphac.driver import compile_file
    exe = tmp_path / "lsq"
    exe.write_bytes(build_learner(compile_file(example("lsq_adam")).learner, "x86_64").elf)
    os.chmod(exe, 0o755)
    subprocess.run([exe, "--steps", "3", "--checkpoint", tmp_path / "ck"], check=True,
                   capture_output=True)
    data = (tmp_path / "ck" / "MANIFEST").read_bytes()
    h = formats.CKPT_HEADER.unpack(data)
    assert h["magic"] == formats.CKPT_MAGIC and h["format"] == formats.CKPT_FORMAT
    assert (h["version"], h["layout"], h["owner_lo"], h["owner_hi"]) == (3, 0, 0, 1)
    size = formats.CKPT_HEADER.size + formats.CKPT_RECORD.size * h["count"] + formats.CKPT_TRAILER
    assert len(data) == size and h["count"] == 5            # w, m, v, p1, p2
    recs = [formats.CKPT_RECORD.unpack(data, formats.CKPT_HEADER.size + formats.CKPT_RECORD.size * k)
            for k in range(h["count"])]
    assert [r["state"].rstrip(b"\0") for r in recs] == [b"w", b"m", b"v", b"p1", b"p2"]
    assert all(r["kind"] == formats.CKPT_SHARD for r in recs)
    assert (tmp_path / "ck" / recs[0]["path"].rstrip(b"\0").decode()).exists()


def test_conversation_records_are_the_table_the_runtime_reads():
    from alphac.nvdrv import conversation
    assert conversation.HEADER_WORDS == formats.CONV_HEADER_WORDS
    assert {conversation.OP_NAMES[c] for c in formats.CONV_OPS.values()} >= {"openat", "ioctl", "mmap"}
    nv = (ROOT / "alphac/runtime/nvdrv.rt").read_text()
    assert "8 * NV_HEADER_WORDS" in nv and "8 * NV_ITEM_WORDS" in nv and "kind == 3" not in nv
