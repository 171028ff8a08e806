import pytest

from pipelines.errors import DataError
from pipelines.jsonl import iter_jsonl, write_jsonl


def test_round_trip_with_header_and_line_numbers(tmp_path):
    path = tmp_path / "x.jsonl"
    assert write_jsonl(path, "demo", 2, ['{"a": 1}', '{"a": 2}']) == 2
    assert list(iter_jsonl(path, "demo", 2)) == [(2, {"a": 1}), (3, {"a": 2})]
    assert not list(tmp_path.glob(".*tmp"))  # no temporary file left


@pytest.mark.parametrize("content,needle", [
    (b'{"schema": "other", "version": 2}\n', "field 'schema'"),
    (b'{"schema": "demo", "version": 1}\n', "field 'version'"),
    (b'{"schema": "demo", "version": 2}\n{"a": \n', "record line 2"),
    (b'{"schema": "demo", "version": 2}\n{"a": "\xff"}\n', "not UTF-8"),
])
def test_bad_files_name_file_line_and_field(tmp_path, content, needle):
    path = tmp_path / "bad.jsonl"
    path.write_bytes(content)
    with pytest.raises(DataError) as err:
        list(iter_jsonl(path, "demo", 2))
    assert needle in str(err.value) and "bad.jsonl" in str(err.value)


def test_failed_write_leaves_nothing(tmp_path):
    def lines():
        yield "{}"
        raise RuntimeError("boom")

    with pytest.raises(RuntimeError):
        write_jsonl(tmp_path / "y.jsonl", "demo", 1, lines())
    assert list(tmp_path.iterdir()) == []
