"""The one skipped-samples record: counts beyond the kept pairs, unreadable files, pickling,
and the channel that brings the workers' skips to the main process."""

from __future__ import annotations

import pickle
from pathlib import Path

from datamodules.core.skipped import SkipChannel, Skipped


def test_counts_stay_complete_beyond_the_kept_pairs() -> None:
    skipped = Skipped(limit=2)
    for line in (3, 5, 8):
        skipped.record("a.jsonl", line, "invalid JSON")
    skipped.record("img/cat/bad.png", None, "not an image")  # the file is the sample
    skipped.add("b.tar", 0, error="cannot read shard")
    assert skipped == [("a.jsonl: line 3", "invalid JSON"), ("a.jsonl: line 5", "invalid JSON")]
    assert skipped.counts == {"a.jsonl": 3, "img/cat/bad.png": 1}
    assert skipped.unreadable == {"b.tar": "cannot read shard"}
    assert skipped.records == 4 and skipped.total == 5
    assert repr(skipped).startswith("Skipped(5: 'a.jsonl: line 3' (invalid JSON), ")
    assert skipped.summary().splitlines()[0] == (
        "skipped 4 bad record(s) in 2 file(s) and 1 unreadable file(s)"
    )
    again = pickle.loads(pickle.dumps(skipped))
    assert again == skipped and again.counts == skipped.counts and again.total == 5
    again.record("c.txt", 1, "invalid UTF-8")  # its lock came back too
    assert again.total == 6


def test_the_channel_delivers_whole_lines_once(tmp_path: Path) -> None:
    channel = SkipChannel(str(tmp_path))
    assert not channel.has_new()
    odd = "img/caf\udce9\t1.jpg"  # a path that is not UTF-8, with a tab
    channel.send(odd, None, "truncated\nJPEG")
    channel.send("s.tar", "key 'a/b'", "no image field")
    with open(channel.path, "a") as log:
        log.write('["half", null, "a line still being wri')  # a worker mid-append
    received = Skipped()
    assert channel.receive(received) == [
        (odd, "truncated\nJPEG"),
        ("s.tar: key 'a/b'", "no image field"),
    ]
    assert received.counts == {odd: 1, "s.tar": 1}
    with open(channel.path, "a") as log:
        log.write('tten"]\n')
    assert channel.receive(received) == [("half", "a line still being written")]
    assert not channel.has_new() and channel.receive(received) == []
    assert received.total == 3
