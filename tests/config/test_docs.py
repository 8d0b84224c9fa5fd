from __future__ import annotations

from rlkit.cli import docs
from rlkit.config.schema import FIELDS, KEYS, key_layers


def test_configuration_doc_is_fresh() -> None:
    assert docs.DOC_PATH.read_text() == docs.render(), "stale: run `python -m rlkit.cli.docs`"


def test_doc_lists_every_key_with_its_layers() -> None:
    text = docs.render()
    assert text.startswith("# Configuration\n")
    for name in KEYS:
        row = next(line for line in text.splitlines() if line.startswith(f"| `{name}` |"))
        assert ", ".join(layer.value for layer in key_layers(name)) in row
        assert FIELDS[name].description.split(";")[0].replace("|", "\\|") in row


def test_check_mode_reports_a_stale_doc(tmp_path, monkeypatch) -> None:
    stale = tmp_path / "configuration.md"
    stale.write_text("# Configuration\nold\n")
    monkeypatch.setattr(docs, "DOC_PATH", stale)
    assert docs.main(["--check"]) == 1
    assert docs.main([]) == 0 and docs.main(["--check"]) == 0
