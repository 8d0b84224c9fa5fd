from __future__ import annotations

from pathlib import Path

import pyarrow as pa
import pyarrow.parquet as pq
import pytest

from rlkit.validate._parquet_footer import ParquetFooterError, read_footer


@pytest.mark.parametrize("compression", ["snappy", "none", "zstd"])
def test_matches_pyarrow_on_nested_and_many_row_groups(tmp_path: Path, compression: str) -> None:
    table = pa.table({
        "task_id": [f"t{i}" for i in range(300)],
        "prompt": [[{"role": "user", "content": "x" * (i % 7)}] for i in range(300)],
        "reward_model": [{"style": "rule", "ground_truth": ""} for _ in range(300)],
        "pass_rate": [i / 300 for i in range(300)],
        "flags": [[True, False] for _ in range(300)],
        "meta": [{"a": 1} for _ in range(300)],
    })
    path = tmp_path / "t.parquet"
    pq.write_table(table, path, row_group_size=64, compression=compression)
    rows, names = read_footer(str(path))
    meta = pq.ParquetFile(path).metadata
    assert rows == meta.num_rows == 300
    assert names == meta.schema.to_arrow_schema().names


def test_index_builder_output(tmp_path: Path) -> None:
    from tests.validate.helpers import write_index

    path = write_index(tmp_path / "i.parquet", rows=3)
    assert read_footer(str(path))[0] == 3


@pytest.mark.parametrize("content", [b"", b"PAR1", b"a,b\n1,2\n" * 10, b"PAR1" + b"\0" * 20 + b"PAR1"])
def test_rejects_non_parquet(tmp_path: Path, content: bytes) -> None:
    path = tmp_path / "x.parquet"
    path.write_bytes(content)
    with pytest.raises(ParquetFooterError):
        read_footer(str(path))
