"""Key-space scan engine: SCAN, then the type, bytes and element count of every key (and the
encoding of a sample of them), pipelined on one connection, leaving no mark on the server, paced
to a share of its CPU.

No mark: no key's LRU/LFU clock moves and no error counter rises.
- SCAN (with or without TYPE), OBJECT ENCODING, TYPE and MEMORY USAGE never touch a key. Length
  commands (STRLEN, LLEN, …) do, unless the connection is `CLIENT NO-TOUCH ON` (Redis 7.2+,
  Valkey). Without it they are skipped (element counts NULL, the result says why) unless the
  caller allows touching; the result then counts the keys touched.
- A length command is chosen from the key's known type, never guessed: no WRONGTYPE.

Where a key's type comes from (`type_source`):
- "scan": each page is read by `SCAN cursor COUNT n TYPE t`, one for each type (string, hash,
  list, set, zset, stream), instead of one plain SCAN. The TYPE filter is applied to the keys
  of the buckets the page walks, so every typed SCAN from the same cursor walks the same
  buckets and returns the same next cursor: a page where a cursor differs (a table resized
  meanwhile) is read again by a plain SCAN, and TYPE asked for its keys. The plain SCAN is
  sent beside the typed ones where a module is loaded (its keys are in no typed page: TYPE
  asked), and once for the page where the key cap falls (its keys are cut in SCAN order).
  Used where the filter is cheap: Valkey and Redis 7.2+ (filtered while walking, ~0.1 µs per
  key for all the typed SCANs of a page, no keyspace hit in Valkey).
- "scan+type": Redis 6.0-7.1 look each walked key up again for every typed SCAN (~0.27 µs per
  key each, a keyspace hit each): beside the plain SCAN, only the most common type so far is
  scanned (when it holds at least TYPED_SCAN_MIN_SHARE of the keys), TYPE is asked for the
  others.
- "encoding" (before 6.0: no SCAN TYPE; or when asked): OBJECT ENCODING of every key, which
  names the type for most encodings, TYPE where the encoding is shared by several types.
Then each key needs its length command and MEMORY USAGE (2 commands; 1 without element
counts), the length command first: a key gone before it reads 0, and its MEMORY USAGE then reads
null, so it is dropped, not misread. OBJECT ENCODING is asked for every key of the first
ENCODING_FIRST_KEYS and then for one key in `encoding_every` (SCAN order is the hash table's:
a sample that favours no prefix or type), and at the end for the biggest keys by bytes and by
elements (the report's top keys): the result counts the encodings read.

A round is [SCAN (typed SCANs), OBJECT ENCODING of the sampled keys of the last page, marker,
the asks earlier replies made possible, marker, INFO cpu now and then], sent in one write; the
next round is sent as soon as this one's SCAN replies are read, so the server always has the
next round queued. A key's commands go in the round after its page ("scan"), or two rounds
after it for keys whose TYPE was asked.
Python's cost per key stays small: each key's RESP bulk (`$12\r\nuser:1:name\r\n`) is made at
most once and every command block is one join (a separator join where every key gets the
same command); a round's replies are split on CR LF in two sections (OBJECT ENCODING's bulks,
then the single-line replies: numbers, words, nils) and sliced; words and numbers are read
through dicts that remember them. A typed page's commands are built from the reply's own
bytes (its keys' bulks back to back) by one replace; its replies come back in the same order.
Nothing loops over keys in Python but for keys whose TYPE was asked and keys gone meanwhile;
duplicates (SCAN may return a key twice) are found once, at the end, with Arrow. Each round is
one write, and on a plain TCP socket the reader sleeps until the least its replies can weigh
has arrived (SO_RCVLOWAT): on a busy host every wakeup may wait for a time slice.

The budget is a share of the server's real CPU: INFO used_cpu_sys + used_cpu_user over wall
time, less the rate measured just before the scan (other clients), read on the scan's own
connection inside the pipeline (so that a reading covers exactly the rounds before it; where
the prober is on the server's host, /proc gives the same process's CPU as a check). The scan
waits so that its CPU stays under the share both since its start and over any sliding window
of PACING_WINDOW_S.

Modules: result (the budget, the result, ScanError), protocol (the scan's commands and reply
reader over yardstick.access.resp, what a round carries), scan (the state machine), pacer (the
CPU budget), driver (scan_keyspace: the connection and its rounds)."""

from __future__ import annotations

from yardstick.access.keyscan.driver import NO_TOUCH_SINCE, scan_keyspace
from yardstick.access.keyscan.pacer import info_cpu_s, process_cpu_s

# _Protocol, _Reader and _Scan: the tests drive them directly.
from yardstick.access.keyscan.protocol import _Protocol as _Protocol
from yardstick.access.keyscan.protocol import _Reader as _Reader
from yardstick.access.keyscan.result import (
    OWN_COMMANDS,
    ScanBudget,
    ScanError,
    ScanResult,
    own_stats,
    own_usec,
)
from yardstick.access.keyscan.scan import ENCODING_EVERY, ENCODING_FIRST_KEYS, SCAN_TYPES
from yardstick.access.keyscan.scan import _Scan as _Scan

__all__ = [
    "ENCODING_EVERY",
    "ENCODING_FIRST_KEYS",
    "NO_TOUCH_SINCE",
    "OWN_COMMANDS",
    "SCAN_TYPES",
    "ScanBudget",
    "ScanError",
    "ScanResult",
    "info_cpu_s",
    "own_stats",
    "own_usec",
    "process_cpu_s",
    "scan_keyspace",
]
