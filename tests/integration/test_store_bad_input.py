"""Hostile bytes on the wire: garbage, truncated frames, absurd or negative
length prefixes, OP_MSG bodies that are not BSON, unknown opcodes and section
kinds. Each time the server must answer with an error reply or close that
connection (an unknown opcode may also be ignored, as mongod does), never hang
or crash, and keep serving a well-behaved pymongo client; hundreds of them
must not make its memory grow."""

import random
import socket
import struct
import threading
import time

import bson
import pytest
from pymongo import MongoClient

from conftest import OP_MSG, message_header, op_msg, op_msg_raw, read_reply

REPLY_TIMEOUT_SECONDS = 10
RSS_GROWTH_LIMIT_KIB = 64 * 1024


def connect(store):
    sock = socket.create_connection(("127.0.0.1", store.port), timeout=REPLY_TIMEOUT_SECONDS)
    sock.settimeout(REPLY_TIMEOUT_SECONDS)
    return sock


def send_ignoring_reset(sock, data):
    """Sends data; the server may legitimately close before reading it all."""
    try:
        sock.sendall(data)
    except (BrokenPipeError, ConnectionResetError):
        pass


def expect_error_or_close(sock, request_id):
    """The server either closes the connection or answers request_id (None:
    the frame had no meaningful id) with ok: 0. Returns "closed" or "error"."""
    try:
        reply = read_reply(sock)
    except socket.timeout:
        pytest.fail("server neither answered nor closed the connection within %ss"
                    % REPLY_TIMEOUT_SECONDS)
    if reply is None:
        return "closed"
    if request_id is not None:
        assert reply.response_to == request_id, reply
    assert reply.document is not None, "reply of opcode %d has no document" % reply.opcode
    assert reply.document.get("ok") == 0, "malformed request answered ok: %r" % reply.document
    assert isinstance(reply.document.get("code"), int), reply.document
    assert isinstance(reply.document.get("errmsg"), str), reply.document
    return "error"


def expect_error_close_or_ignored(sock, request_id):
    """For an opcode it does not know, mongod logs "Operation isn't
    supported", sends nothing and serves the next request on the same
    connection; an error reply or a close is fine too. A ping sent right
    behind the frame tells the three apart without waiting for a timeout.
    Returns "closed", "error" or "ignored"."""
    follow_up_id = 4343
    send_ignoring_reset(sock, op_msg({"ping": 1, "$db": "admin"}, request_id=follow_up_id))
    try:
        reply = read_reply(sock)
    except socket.timeout:
        pytest.fail("server neither answered, closed, nor served the next request within %ss"
                    % REPLY_TIMEOUT_SECONDS)
    if reply is None:
        return "closed"
    if reply.response_to == request_id:
        assert reply.document is not None and reply.document.get("ok") == 0, reply
        return "error"
    assert reply.response_to == follow_up_id, reply
    assert reply.document["ok"] == 1, reply.document
    return "ignored"


def valid_ping(store):
    """A fresh connection still gets a proper answer."""
    reply = None
    with connect(store) as sock:
        sock.sendall(op_msg({"ping": 1, "$db": "admin"}, request_id=4242))
        reply = read_reply(sock)
    assert reply is not None and reply.response_to == 4242 and reply.document["ok"] == 1


def assert_client_still_works(client, marker):
    collection = client["bad_input"]["survivors"]
    collection.insert_one({"marker": marker})
    assert collection.find_one({"marker": marker})["marker"] == marker
    assert client.admin.command("ping")["ok"] == 1


# ---------------------------------------------------------------------------
# The malformed inputs. Each sends on sock and returns the request id an error
# reply must carry (None when the bytes hold no meaningful id).
# ---------------------------------------------------------------------------

def send_http_request(sock):
    send_ignoring_reset(sock, b"GET / HTTP/1.1\r\nHost: localhost\r\n\r\n")


def send_random_garbage(sock, seed=1):
    rng = random.Random(seed)
    garbage = bytes(rng.randrange(256) for _ in range(512))
    # A length prefix far past the 48 MB limit, so the server cannot wait for
    # "the rest of the frame".
    send_ignoring_reset(sock, struct.pack("<I", 0x7FFFFFF0) + garbage)


def send_garbage_in_valid_frame(sock, seed=2):
    """A well-framed OP_MSG whose 200 body bytes are random."""
    rng = random.Random(seed)
    body = bytes(rng.randrange(256) for _ in range(200))
    # flagBits 0 so that no moreToCome/checksum bit suppresses or changes the reply.
    frame = op_msg_raw(body, request_id=11)
    send_ignoring_reset(sock, frame)
    return 11


def send_truncated_frame(sock):
    frame = op_msg({"insert": "c", "documents": [{"_id": 1, "x": "y" * 100}], "$db": "t"})
    send_ignoring_reset(sock, frame[:len(frame) // 2])


def send_huge_length(sock):
    header = message_header(100 * 1024 * 1024, 12, 0, OP_MSG)
    send_ignoring_reset(sock, header + struct.pack("<I", 0) + b"\x00" + b"\x05\x00\x00\x00\x00")
    return 12


def send_negative_length(sock):
    send_ignoring_reset(sock, message_header(-1, 13, 0, OP_MSG) + b"\x00" * 32)
    return 13


def send_length_below_header(sock):
    send_ignoring_reset(sock, message_header(4, 14, 0, OP_MSG) + b"\x00" * 32)
    return 14


def send_invalid_bson_document_length(sock):
    """Section kind 0 whose document claims more bytes than the frame holds."""
    payload = b"\x00" + struct.pack("<i", 4096) + b"\x10a\x00\x01\x00\x00\x00\x00"
    send_ignoring_reset(sock, op_msg_raw(payload, request_id=15))
    return 15


def send_invalid_bson_element_type(sock):
    """A document with element type 0x7e, which BSON does not define."""
    element = b"\x7eping\x00\x01\x00\x00\x00"
    document = struct.pack("<i", 4 + len(element) + 1) + element + b"\x00"
    send_ignoring_reset(sock, op_msg_raw(b"\x00" + document, request_id=16))
    return 16


def send_invalid_bson_string_length(sock):
    """A string element whose length runs past the end of its document."""
    element = b"\x02ping\x00" + struct.pack("<i", 1000) + b"ab\x00"
    document = struct.pack("<i", 4 + len(element) + 1) + element + b"\x00"
    send_ignoring_reset(sock, op_msg_raw(b"\x00" + document, request_id=17))
    return 17


def send_invalid_bson_missing_terminator(sock):
    document = bytearray(bson.encode({"ping": 1, "$db": "admin"}))
    document[-1] = 0x01
    send_ignoring_reset(sock, op_msg_raw(b"\x00" + bytes(document), request_id=18))
    return 18


def send_unknown_opcode(sock):
    body = bson.encode({"ping": 1, "$db": "admin"})
    send_ignoring_reset(sock, message_header(16 + len(body), 19, 0, 9999) + body)
    return 19


def send_wrong_section_kind(sock):
    body = b"\x07" + bson.encode({"ping": 1, "$db": "admin"})
    send_ignoring_reset(sock, op_msg_raw(body, request_id=20))
    return 20


def send_document_sequence_without_body(sock):
    """Only a kind-1 section: OP_MSG requires exactly one kind-0 body."""
    sequence = b"documents\x00" + bson.encode({"_id": 1})
    section = b"\x01" + struct.pack("<i", 4 + len(sequence)) + sequence
    send_ignoring_reset(sock, op_msg_raw(section, request_id=21))
    return 21


def send_empty_op_msg(sock):
    send_ignoring_reset(sock, op_msg_raw(b"", request_id=22))
    return 22


def send_unknown_required_flag(sock):
    """flagBits bit 5 is reserved and required-to-understand (bits 0-15)."""
    send_ignoring_reset(sock, op_msg({"ping": 1, "$db": "admin"}, request_id=23, flags=1 << 5))
    return 23


def send_body_without_db(sock):
    send_ignoring_reset(sock, op_msg({"ping": 1}, request_id=24))
    return 24


CASES = {
    "http_request": send_http_request,
    "random_garbage": send_random_garbage,
    "garbage_in_valid_frame": send_garbage_in_valid_frame,
    "truncated_frame": send_truncated_frame,
    "huge_length": send_huge_length,
    "negative_length": send_negative_length,
    "length_below_header": send_length_below_header,
    "invalid_bson_document_length": send_invalid_bson_document_length,
    "invalid_bson_element_type": send_invalid_bson_element_type,
    "invalid_bson_string_length": send_invalid_bson_string_length,
    "invalid_bson_missing_terminator": send_invalid_bson_missing_terminator,
    "unknown_opcode": send_unknown_opcode,
    "wrong_section_kind": send_wrong_section_kind,
    "document_sequence_without_body": send_document_sequence_without_body,
    "empty_op_msg": send_empty_op_msg,
    "unknown_required_flag": send_unknown_required_flag,
    "body_without_db": send_body_without_db,
}

# Truncation is the client's doing: the server only has to survive our close.
CLIENT_CLOSES = {"truncated_frame"}
# mongod treats unknown opcodes as fire-and-forget: no reply at all.
MAY_BE_IGNORED = {"unknown_opcode"}


def run_case(store, name):
    """Sends one malformed input on a fresh connection and checks the answer.
    Returns "closed", "error", "ignored" or "client-closed"."""
    with connect(store) as sock:
        request_id = CASES[name](sock)
        if name in CLIENT_CLOSES:
            return "client-closed"
        if name == "http_request":
            return expect_http_answer_or_close(sock)
        if name in MAY_BE_IGNORED:
            return expect_error_close_or_ignored(sock, request_id)
        return expect_error_or_close(sock, request_id)


def expect_http_answer_or_close(sock):
    """mongod answers an HTTP request on its wire port with a plain-text hint
    and closes; closing at once is fine too."""
    received = b""
    try:
        while True:
            chunk = sock.recv(4096)
            if not chunk:
                break
            received += chunk
    except ConnectionResetError:
        pass
    except socket.timeout:
        pytest.fail("server neither answered the HTTP request nor closed the connection")
    assert received == b"" or received.startswith(b"HTTP/"), received[:200]
    return "closed"


@pytest.fixture
def pymongo_client(store):
    client = MongoClient(store.uri, serverSelectionTimeoutMS=10000, socketTimeoutMS=15000)
    yield client
    client.close()


@pytest.mark.parametrize("name", sorted(CASES))
def test_malformed_input_is_refused_and_server_keeps_serving(store, pymongo_client, name):
    assert_client_still_works(pymongo_client, "before-" + name)
    run_case(store, name)
    assert store.is_alive(), "store died on %s" % name
    valid_ping(store)
    assert_client_still_works(pymongo_client, "after-" + name)


@pytest.mark.parametrize("name", ["huge_length", "negative_length", "length_below_header",
                                  "random_garbage"])
def test_unframeable_input_closes_the_connection(store, name):
    """A length prefix outside [16, 48000000] cannot be answered in-frame:
    mongod drops the connection."""
    assert run_case(store, name) == "closed"


def test_connection_survives_a_parse_error_reply(store):
    """A command error (here: a reply to an unknown command) leaves the
    connection usable for the next request."""
    with connect(store) as sock:
        sock.sendall(op_msg({"noSuchCommand": 1, "$db": "admin"}, request_id=31))
        reply = read_reply(sock)
        assert reply is not None and reply.response_to == 31
        assert reply.document["ok"] == 0 and reply.document["code"] == 59
        sock.sendall(op_msg({"ping": 1, "$db": "admin"}, request_id=32))
        reply = read_reply(sock)
        assert reply is not None and reply.response_to == 32 and reply.document["ok"] == 1


def test_request_split_across_many_writes_is_answered(store):
    """A valid frame dribbled one byte at a time is still one request."""
    frame = op_msg({"ping": 1, "$db": "admin"}, request_id=41)
    with connect(store) as sock:
        sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
        for offset in range(len(frame)):
            sock.sendall(frame[offset:offset + 1])
            if offset % 8 == 0:
                time.sleep(0.002)
        reply = read_reply(sock)
    assert reply is not None and reply.response_to == 41 and reply.document["ok"] == 1


def test_pipelined_requests_are_answered_in_order(store):
    frames = b"".join(op_msg({"ping": 1, "$db": "admin"}, request_id=100 + i) for i in range(20))
    with connect(store) as sock:
        sock.sendall(frames)
        replies = [read_reply(sock) for _ in range(20)]
    assert [r.response_to for r in replies] == [100 + i for i in range(20)]
    assert all(r.document["ok"] == 1 for r in replies)


def test_many_malformed_inputs_do_not_grow_memory(store, pymongo_client):
    """A few hundred malformed connections, with a pymongo client working
    throughout: no client error, the server alive, RSS bounded."""
    names = sorted(CASES)
    client_errors = []
    client_rounds = [0]
    stop = threading.Event()

    def keep_working():
        while not stop.is_set():
            try:
                assert_client_still_works(pymongo_client, "loop-%d" % client_rounds[0])
                client_rounds[0] += 1
            except Exception as error:  # recorded and reported by the main thread
                client_errors.append(repr(error))
                return
            time.sleep(0.01)

    def hammer(count, offset):
        for i in range(count):
            run_case(store, names[(offset + i) % len(names)])

    worker = threading.Thread(target=keep_working, daemon=True)
    worker.start()
    try:
        hammer(60, 0)  # warm-up: allocator pools, thread stacks, caches
        baseline = store.rss_kib()
        hammer(340, 60)
        assert store.is_alive(), "store died during the loop"
        grown = store.rss_kib() - baseline
    finally:
        stop.set()
        worker.join(20)
    assert not client_errors, "the well-behaved client failed: %s" % client_errors
    assert client_rounds[0] > 0
    assert grown <= RSS_GROWTH_LIMIT_KIB, "RSS grew by %d KiB over 340 malformed inputs" % grown
    valid_ping(store)
    assert_client_still_works(pymongo_client, "end")
