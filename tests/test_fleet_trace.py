"""Trace parsing (including bad lines), the shipped traces and the synthetic generators."""

from __future__ import annotations

import json

import pytest

from mabp_gym.fleet import (
    BLOCK_TOKENS,
    agentic_session_trace,
    load_trace,
    parse_mooncake,
    prefix_tree_trace,
    read_mooncake,
    shipped_trace,
    trace_from_columns,
    write_mooncake,
)

GOOD = '{"timestamp": 0, "input_length": 600, "output_length": 5, "hash_ids": [0, 1]}'


def test_parse__reads_the_four_fields_and_skips_blank_lines():
    trace = parse_mooncake([GOOD, "", GOOD.replace('"timestamp": 0', '"timestamp": 250')])
    assert len(trace) == 2 and trace.requests[1].timestamp == 250.0
    assert trace.requests[0].hash_ids == (0, 1) and trace.requests[0].input_length == 600
    assert trace.duration_s == pytest.approx(0.25)


@pytest.mark.parametrize(
    ("line", "message"),
    [
        ("{not json", "not valid JSON"),
        ("[1, 2]", "expected a JSON object"),
        (
            '{"timestamp": 1, "input_length": 5, "output_length": 5}',
            r"missing field\(s\) \['hash_ids'\]",
        ),
        (
            GOOD.replace('"input_length": 600', '"input_length": -3'),
            "input_length must be an integer number of tokens in \\[1,",
        ),
        (GOOD.replace('"output_length": 5', '"output_length": 2.5'), "output_length must be"),
        (GOOD.replace('"timestamp": 0', '"timestamp": "noon"'), "timestamp must be"),
        (GOOD.replace("[0, 1]", "[]"), "hash_ids must be a non-empty list"),
        (GOOD.replace("[0, 1]", '[0, "a"]'), "hash_ids must be a non-empty list"),
        # A repeat read as a hit on the request's own block (KV hit ratio 0.97).
        (GOOD.replace("[0, 1]", "[1, 1]"), r"hash_ids repeat a block id within the request \(1\)"),
    ],
)
def test_parse__a_bad_line_is_named_with_its_number(line, message):
    with pytest.raises(ValueError, match=rf"mine line 3: {message}"):
        parse_mooncake([GOOD, GOOD, line], name="mine")


def test_parse__out_of_order_timestamps_name_the_line():
    late = GOOD.replace('"timestamp": 0', '"timestamp": 900')
    with pytest.raises(ValueError, match="t line 2: timestamp 0 is earlier than the previous"):
        parse_mooncake([late, GOOD], name="t")


def test_read__missing_file_and_empty_file_are_clear_errors(tmp_path):
    with pytest.raises(ValueError, match="does not exist"):
        read_mooncake(tmp_path / "nope.jsonl")
    (tmp_path / "empty.jsonl").write_text("\n")
    with pytest.raises(ValueError, match="no requests"):
        read_mooncake(tmp_path / "empty.jsonl")


def test_shipped_traces__have_the_documented_sizes_and_block_lengths():
    conversation, synthetic = shipped_trace("conversation"), shipped_trace("synthetic")
    assert len(conversation) == 12_031 and len(synthetic) == 3_993
    for trace in (conversation, synthetic):
        for r in trace.requests[:500]:
            assert (
                (len(r.hash_ids) - 1) * BLOCK_TOKENS
                < r.input_length
                <= len(r.hash_ids) * BLOCK_TOKENS
            )
    assert conversation.duration_s == pytest.approx(3536.999)
    with pytest.raises(ValueError, match="unknown shipped trace 'chat'"):
        shipped_trace("chat")


@pytest.mark.parametrize("make", [prefix_tree_trace, agentic_session_trace])
def test_generators__valid_mooncake_fields_deterministic_and_round_trip(make, tmp_path):
    trace = make(300, seed=5)
    assert trace == make(300, seed=5) and trace != make(300, seed=6)
    stamps = [r.timestamp for r in trace.requests]
    assert stamps == sorted(stamps)
    for r in trace.requests:
        assert (
            (len(r.hash_ids) - 1) * BLOCK_TOKENS < r.input_length <= len(r.hash_ids) * BLOCK_TOKENS
        )
    path = tmp_path / "t.jsonl.gz"
    write_mooncake(trace, path)
    again = load_trace(str(path))
    assert [r.hash_ids for r in again.requests] == [r.hash_ids for r in trace.requests]
    assert [r.timestamp for r in again.requests] == pytest.approx(stamps)


def test_agentic_sessions__each_turn_extends_its_session_prompt():
    trace = agentic_session_trace(200, sessions=5, seed=0)
    by_root: dict[int, tuple[int, ...]] = {}
    for r in trace.requests:
        own = r.hash_ids[2]  # first block after the 2-block system prompt
        root = next((k for k, prev in by_root.items() if r.hash_ids[: len(prev)] == prev), own)
        by_root[root] = r.hash_ids
    assert len(by_root) == 5


def test_generators__reject_bad_arguments():
    with pytest.raises(ValueError, match="count must be a positive integer"):
        prefix_tree_trace(0)
    with pytest.raises(ValueError, match="rate must be positive"):
        agentic_session_trace(10, rate=-1.0)
    with pytest.raises(ValueError, match="burstiness"):
        agentic_session_trace(10, burstiness=0.0)
    # Block ids below 0 (the simulator's own), numpy's "low >= high", a -508-token prompt:
    for bad, message in (
        (
            lambda: agentic_session_trace(5, system_blocks=-2),
            "system_blocks must be an integer >= 0",
        ),
        (lambda: agentic_session_trace(5, turn_blocks=0), "turn_blocks must be an integer >= 1"),
        (lambda: prefix_tree_trace(5, shared_blocks=(0, -1)), r"shared_blocks\[1\] must be"),
        (
            lambda: prefix_tree_trace(5, tail_blocks=(3, 1)),
            r"tail_blocks\[1\] must be an integer >= 3",
        ),
        (
            lambda: prefix_tree_trace(5, shared_blocks=(0, 0), tail_blocks=(0, 1)),
            "a prompt of no block",
        ),
    ):
        with pytest.raises(ValueError, match=message):
            bad()


def test_write__refuses_what_the_reader_would_refuse_or_misread(tmp_path):
    from dataclasses import replace

    from mabp_gym.fleet import Trace, TraceRequest

    out = tmp_path / "t.jsonl"
    small = replace(parse_mooncake([GOOD]), block_tokens=256)  # read back as 512
    with pytest.raises(ValueError, match="256-token blocks"):
        write_mooncake(small, out)
    for ids, word in (((), "no"), ((3, -1), "a negative")):
        with pytest.raises(ValueError, match=f"requests\\[0\\] has {word} block id"):
            write_mooncake(Trace("hand", (TraceRequest(0.0, 600, 5, ids),)), out)
    assert not out.exists()


def test_read__gzip_is_known_by_its_bytes_not_its_name(tmp_path):
    import gzip

    from mabp_gym.fleet.trace import read_mooncake

    data = gzip.compress(((_line() + "\n") * 3).encode())
    for name in ("UPPER.JSONL.GZ", "named.jsonl"):  # both were "not UTF-8 text"
        (tmp_path / name).write_bytes(data)
        assert len(read_mooncake(tmp_path / name)) == 3


def test_write__timestamps_stay_integers_when_whole(tmp_path):
    trace = parse_mooncake([GOOD])
    write_mooncake(trace, tmp_path / "x.jsonl")
    assert json.loads((tmp_path / "x.jsonl").read_text())["timestamp"] == 0


def test_trace_from_columns__sorts_and_gives_fresh_blocks_without_hashes():
    trace = trace_from_columns([500.0, 0.0], [1200, 100], [10, 20], name="azure")
    assert [r.input_length for r in trace.requests] == [100, 1200]
    assert trace.requests[0].hash_ids == (0,) and trace.requests[1].hash_ids == (1, 2, 3)
    with pytest.raises(ValueError, match="azure row 0: output_length must be"):
        trace_from_columns([0.0], [10], [0], name="azure")
    with pytest.raises(ValueError, match="same length"):
        trace_from_columns([0.0, 1.0], [10], [5, 5])


def _line(**fields) -> str:
    record = {"timestamp": 0, "input_length": 1024, "output_length": 5, "hash_ids": [0, 1]}
    record.update(fields)
    return json.dumps(record)


@pytest.mark.parametrize(
    ("text", "message"),
    [
        (
            '{"timestamp": Infinity, "input_length": 5, "output_length": 5, "hash_ids": [0]}',
            "Infinity is not a number",
        ),
        (
            '{"timestamp": 1e400, "input_length": 5, "output_length": 5, "hash_ids": [0]}',
            r"timestamp must be a number of ms in \[0, 1e\+10\]",
        ),
        (
            '{"timestamp": NaN, "input_length": 5, "output_length": 5, "hash_ids": [0]}',
            "NaN is not a number",
        ),
        (_line(timestamp=1e300), r"timestamp must be a number of ms in \[0, 1e\+10\]"),
        (_line(input_length=10**30), r"input_length .* in \[1, 2,097,152\]"),
        (_line(output_length=10**12), r"output_length .* in \[1, 262,144\]"),
        (_line(hash_ids=[0, -1]), "hash_ids must be >= 0"),
        (_line(input_length=1, hash_ids=list(range(5000))), "5000 hash_ids for 1 input tokens"),
        ("[" * 100_000 + "]" * 100_000, "nested too deeply|not valid JSON"),
    ],
    ids=[
        "inf",
        "1e400",
        "nan",
        "1e300",
        "huge-input",
        "huge-output",
        "negative-id",
        "too-many-ids",
        "nested",
    ],
)
def test_parse__every_trace_number_is_bounded(text, message):
    with pytest.raises(ValueError, match=f"t line 1: .*(?:{message})"):
        parse_mooncake([text], "t")


def test_read__names_the_file_for_bad_bytes_gzip_and_non_files(tmp_path):
    import gzip

    from mabp_gym.fleet.trace import read_mooncake

    latin = tmp_path / "latin.jsonl"
    latin.write_bytes(_line().encode() + b"\n" + b'{"x": "\xff"}\n')
    with pytest.raises(ValueError, match="latin.jsonl: not UTF-8"):
        read_mooncake(latin)
    whole = gzip.compress(((_line() + "\n") * 50).encode())
    for name, data in (("cut.jsonl.gz", whole[: len(whole) // 2]), ("plain.jsonl.gz", b"hi")):
        (tmp_path / name).write_bytes(data)
        with pytest.raises(ValueError, match=f"{name}: not a readable gzip file"):
            read_mooncake(tmp_path / name)
    with pytest.raises(ValueError, match="is not a regular file"):
        read_mooncake(tmp_path)
    with pytest.raises(ValueError, match="does not exist"):
        read_mooncake(tmp_path / "missing.jsonl")


def test_read__stops_at_the_limit_without_reading_the_rest(tmp_path):
    from mabp_gym.fleet.trace import read_mooncake

    path = tmp_path / "t.jsonl"
    path.write_text(_line() + "\n" + _line(timestamp=5) + "\n" + "not json\n")
    assert len(read_mooncake(path, limit=2)) == 2  # the bad third line is never read
    with pytest.raises(ValueError, match="line 3"):
        read_mooncake(path)


# -- mutated lines: the reader never crashes and never accepts nonsense -----------
from hypothesis import given, settings  # noqa: E402
from hypothesis import strategies as st  # noqa: E402

MUTABLE = '{"timestamp": 10, "input_length": 1024, "output_length": 8, "hash_ids": [1, 2]}'
_values = st.one_of(
    st.none(),
    st.booleans(),
    st.integers(min_value=-(10**30), max_value=10**30),
    st.floats(allow_nan=True, allow_infinity=True),
    st.text(max_size=5),
    st.lists(st.integers(min_value=-5, max_value=10**6), max_size=6),
)


@settings(max_examples=200, deadline=None)
@given(
    field=st.sampled_from(["timestamp", "input_length", "output_length", "hash_ids", "extra"]),
    value=_values,
)
def test_parse__a_mutated_field_is_refused_by_name_or_read_within_bounds(field, value):
    import json as _json

    from mabp_gym.fleet.trace import MAX_INPUT_TOKENS, MAX_OUTPUT_TOKENS, MAX_TIMESTAMP_MS

    line = _json.loads(MUTABLE)
    line[field] = value
    try:
        text = _json.dumps(line)
    except ValueError:
        return  # not representable as JSON text at all
    try:
        (request,) = parse_mooncake([text], name="t").requests
    except ValueError as error:
        assert "t line 1" in str(error)
        return
    assert 0 <= request.timestamp <= MAX_TIMESTAMP_MS
    assert 1 <= request.input_length <= MAX_INPUT_TOKENS
    assert 1 <= request.output_length <= MAX_OUTPUT_TOKENS
    assert all(isinstance(b, int) and b >= 0 for b in request.hash_ids)
    assert len(request.hash_ids) <= -(-request.input_length // 512)


@settings(max_examples=200, deadline=None)
@given(cut=st.integers(min_value=0, max_value=len(MUTABLE)), junk=st.text(max_size=8))
def test_parse__a_truncated_or_garbled_line_is_refused_by_name(cut, junk):
    text = MUTABLE[:cut] + junk
    try:
        parse_mooncake([text], name="t")
    except ValueError as error:  # a blank line leaves no request: the trace is named
        assert "t line 1" in str(error) or str(error) == "t: no requests"


def test_spread_bursts__spreads_each_run_of_equal_times_up_to_the_next_tick():
    from mabp_gym.fleet import Trace, TraceRequest

    times = (0.0, 0.0, 0.0, 300.0, 600.0, 600.0)
    trace = Trace("t", tuple(TraceRequest(t, 10, 1, (k,)) for k, t in enumerate(times)))
    spread = trace.spread_bursts()
    assert [r.timestamp for r in spread.requests] == [0.0, 100.0, 200.0, 300.0, 600.0, 600.0]
    assert [r.hash_ids for r in spread.requests] == [r.hash_ids for r in trace.requests]
    assert spread.name == "t-spread"


@pytest.mark.parametrize(
    ("columns", "message"),
    [
        (([5000, 1000, 3000], [100, 200, 300], [0, 10, 10]), "columns row 0: output_length"),
        (([0, 1000], [100.9, 700], [10, 10]), r"input_lengths\[0\]: must be a whole number"),
        (([0, 1000], [100, float("nan")], [10, 10]), r"input_lengths\[1\]: must be a whole"),
        (([0, 1000], [100, "abc"], [10, 10]), r"input_lengths\[1\]: must be a whole number"),
        (([0, True], [100, 100], [10, 10]), r"timestamps_ms\[1\]: must be a finite number"),
    ],
)
def test_trace_from_columns__refuses_by_column_and_the_callers_row(columns, message):
    # int() truncated 100.9 tokens, and errors named the row's place after sorting.
    with pytest.raises(ValueError, match=message):
        trace_from_columns(*columns)


def test_trace_from_columns__a_string_of_hash_ids_is_not_split_into_digits():
    with pytest.raises(ValueError, match=r"hash_ids\[0\]: must be a list of integers"):
        trace_from_columns([0, 1000], [100, 100], [10, 10], hash_ids=["12", [3]])
    trace = trace_from_columns([1000, 0], [100, 600], [10, 10], hash_ids=[[1], [1, 2]])
    assert [r.hash_ids for r in trace.requests] == [(1, 2), (1,)]


def test_load_trace__refuses_a_local_file_named_like_a_shipped_trace(tmp_path, monkeypatch):
    # Before, the shipped trace silently replaced the user's file of that name.
    monkeypatch.chdir(tmp_path)
    line = {"timestamp": 0, "input_length": 10, "output_length": 5, "hash_ids": [1]}
    (tmp_path / "synthetic").write_text(json.dumps(line) + "\n")
    with pytest.raises(ValueError, match=r"pass \./synthetic for the file"):
        load_trace("synthetic")
    assert len(load_trace("./synthetic").requests) == 1
    assert len(load_trace("conversation", limit=3).requests) == 3  # no such file here
    (tmp_path / "conversation").mkdir()  # a folder of that name is no trace: no ambiguity
    assert len(load_trace("conversation", limit=3).requests) == 3
