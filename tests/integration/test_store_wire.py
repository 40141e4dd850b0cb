"""The wire protocol end to end against `thermocline store`, byte by byte: the
legacy OP_QUERY handshake answered with OP_REPLY (and a legacy find or any other
command in OP_QUERY refused as mongod 6.0 refuses it, by the store and the
proxy), OP_COMPRESSED (noop, snappy,
zlib) negotiated there and answered in kind, OP_MSG checksums, --max-conns,
and the handshake and small server commands drivers send on connect."""

import socket
import struct
import zlib

import bson
import pytest
from bson import Binary

from conftest import (OP_MSG, OP_QUERY, OP_REPLY, ProxyProcess, StoreProcess, message_header, op_msg, op_msg_raw,
                      proxy_config, read_reply, wait_until, wire_command)

OP_COMPRESSED = 2012
NOOP, SNAPPY, ZLIB = 0, 1, 2
CHECKSUM_PRESENT = 1 << 0


def connect(port):
    sock = socket.create_connection(("127.0.0.1", port), timeout=10)
    sock.settimeout(10)
    return sock


def op_query(namespace, document, request_id):
    """An OP_QUERY frame: flags, namespace, numberToSkip 0, numberToReturn -1."""
    body = struct.pack("<i", 0) + namespace.encode() + b"\x00" + struct.pack("<ii", 0, -1) + bson.encode(document)
    return message_header(16 + len(body), request_id, 0, OP_QUERY) + body


# ---------------------------------------------------------------------------
# Snappy's block format by hand (python3-snappy is not installed): requests are
# sent as literals only; replies may use copies.
# ---------------------------------------------------------------------------

def varint(value):
    out = bytearray()
    while value >= 0x80:
        out.append((value & 0x7F) | 0x80)
        value >>= 7
    out.append(value)
    return bytes(out)


def snappy_literals(data):
    out = bytearray(varint(len(data)))
    for start in range(0, len(data), 60):
        chunk = data[start:start + 60]
        out.append((len(chunk) - 1) << 2)
        out += chunk
    return bytes(out)


def snappy_decompress(data):
    length, shift, position = 0, 0, 0
    while True:
        byte = data[position]
        position += 1
        length |= (byte & 0x7F) << shift
        shift += 7
        if byte < 0x80:
            break
    out = bytearray()
    while position < len(data):
        tag = data[position]
        position += 1
        kind = tag & 3
        if kind == 0:
            size = tag >> 2
            if size >= 60:
                extra = size - 59
                size = int.from_bytes(data[position:position + extra], "little")
                position += extra
            size += 1
            out += data[position:position + size]
            position += size
            continue
        if kind == 1:
            size = ((tag >> 2) & 7) + 4
            offset = ((tag >> 5) << 8) | data[position]
            position += 1
        else:
            width = 2 if kind == 2 else 4
            size = (tag >> 2) + 1
            offset = int.from_bytes(data[position:position + width], "little")
            position += width
        for _ in range(size):  # byte by byte: a copy may overlap what it writes
            out.append(out[-offset])
    assert len(out) == length
    return bytes(out)


def compress(frame, compressor_id):
    """frame wrapped in OP_COMPRESSED with compressor_id."""
    request_id = struct.unpack_from("<i", frame, 4)[0]
    original_opcode = struct.unpack_from("<i", frame, 12)[0]
    payload = frame[16:]
    squeezed = {NOOP: payload, SNAPPY: snappy_literals(payload), ZLIB: zlib.compress(payload)}[compressor_id]
    body = struct.pack("<iiB", original_opcode, len(payload), compressor_id) + squeezed
    return message_header(16 + len(body), request_id, 0, OP_COMPRESSED) + body


def decompress_reply(reply):
    """(compressor id, original opcode, reply document) of an OP_COMPRESSED reply."""
    original_opcode, size, compressor_id = struct.unpack_from("<iiB", reply.raw, 16)
    squeezed = reply.raw[25:]
    payload = {NOOP: lambda data: data, SNAPPY: snappy_decompress, ZLIB: zlib.decompress}[compressor_id](squeezed)
    assert len(payload) == size
    assert original_opcode == OP_MSG and payload[4] == 0
    return compressor_id, original_opcode, bson.decode(payload[5:5 + struct.unpack_from("<i", payload, 5)[0]])


# ---------------------------------------------------------------------------

def test_op_query_handshake_is_answered_with_op_reply(store):
    """Older drivers (and YCSB's Java driver) open with isMaster in OP_QUERY on
    admin.$cmd; the answer is an OP_REPLY naming the compressors both know."""
    with connect(store.port) as sock:
        sock.sendall(op_query("admin.$cmd", {"isMaster": 1, "compression": ["zstd", "zlib", "snappy"],
                                             "client": {"driver": {"name": "raw", "version": "0"}}}, 7))
        reply = read_reply(sock)
        assert reply.opcode == OP_REPLY and reply.response_to == 7
        flags, cursor_id, starting_from, returned = struct.unpack_from("<iqii", reply.raw, 16)
        assert (flags, cursor_id, starting_from, returned) == (AWAIT_CAPABLE, 0, 0, 1)
        hello = reply.document
        assert hello["ok"] == 1 and hello["ismaster"] is True
        assert (hello["minWireVersion"], hello["maxWireVersion"]) == (0, 17)
        assert hello["maxMessageSizeBytes"] == 48_000_000 and hello["maxWriteBatchSize"] == 100_000
        assert hello["compression"] == ["zlib", "snappy"]  # the client's order, zstd unknown
        # Later commands on the same connection may use OP_MSG.
        sock.sendall(op_msg({"ping": 1, "$db": "admin"}, request_id=8))
        reply = read_reply(sock)
        assert reply.opcode == OP_MSG and reply.response_to == 8 and reply.document["ok"] == 1
        # Any other command in OP_QUERY is refused before it is looked up (not 59 CommandNotFound).
        sock.sendall(op_query("admin.$cmd", {"noSuchCommand": 1}, 9))
        reply = read_reply(sock)
        assert reply.opcode == OP_REPLY and list(reply.document.items()) == unsupported_op_query("noSuchCommand")


AWAIT_CAPABLE = 1 << 3  # OP_REPLY responseFlags mongod sets on every command reply


def unsupported_op_query(name):
    """mongod 6.0's error document for an OP_QUERY command other than the handshake's."""
    return [("ok", 0.0),
            ("errmsg", "Unsupported OP_QUERY command: %s. The client driver may require an upgrade. "
                       "For more details see https://dochub.mongodb.org/core/legacy-opcode-removal" % name),
            ("code", 352), ("codeName", "UnsupportedOpQueryCommand")]


def assert_op_query_commands_refused(port):
    """OP_QUERY on <db>.$cmd carries only the handshake (and the few commands mongod
    6.0 still lets through, such as buildinfo): anything else, known or not, gets
    an OP_REPLY flagged AwaitCapable (not QueryFailure) holding {ok: 0, errmsg,
    code: 352, codeName}, is not run, and leaves the connection usable."""
    with connect(port) as sock:
        refused = [{"insert": "refused", "documents": [{"_id": 1}]}, {"ping": 1}, {"find": "refused"},
                   {"noSuchCommand": 1}, {"logout": 1}, {"$query": {"count": "refused"}}]
        for request_id, command in enumerate(refused, start=40):
            sock.sendall(op_query("wire.$cmd", command, request_id))
            reply = read_reply(sock)
            assert reply is not None and reply.opcode == OP_REPLY and reply.response_to == request_id, command
            flags, cursor_id, starting_from, returned = struct.unpack_from("<iqii", reply.raw, 16)
            assert (flags, cursor_id, starting_from, returned) == (AWAIT_CAPABLE, 0, 0, 1)
            name = next(iter(command["$query"] if "$query" in command else command))
            assert list(reply.document.items()) == unsupported_op_query(name), command
            assert isinstance(reply.document["ok"], float)
        for request_id, command in enumerate([{"ismaster": 1}, {"hello": 1}], start=50):
            sock.sendall(op_query("admin.$cmd", command, request_id))
            reply = read_reply(sock)
            assert reply.opcode == OP_REPLY and reply.response_to == request_id and reply.document["ok"] == 1
        sock.sendall(op_msg({"find": "refused", "$db": "wire"}, request_id=60))
        reply = read_reply(sock)
        assert reply.opcode == OP_MSG and reply.response_to == 60
        assert reply.document["ok"] == 1 and reply.document["cursor"]["firstBatch"] == []  # the insert never ran


def test_op_query_commands_other_than_the_handshake_are_refused(store):
    assert_op_query_commands_refused(store.port)
    with connect(store.port) as sock:
        # mongod 6.0 still runs buildinfo sent this way, answering in OP_REPLY.
        sock.sendall(op_query("admin.$cmd", {"buildinfo": 1}, 70))
        reply = read_reply(sock)
        assert reply.opcode == OP_REPLY and reply.document["ok"] == 1 and "version" in reply.document


def op_reply_parts(reply):
    """(responseFlags, cursorID, startingFrom, numberReturned) of an OP_REPLY, after
    checking that its frame is exactly the header, those fields and one document."""
    assert reply.opcode == OP_REPLY
    length = struct.unpack_from("<i", reply.raw, 0)[0]
    assert length == len(reply.raw) == 16 + 20 + len(bson.encode(reply.document))
    return struct.unpack_from("<iqii", reply.raw, 16)


def legacy_command(sock, command, request_id):
    """Sends command as OP_QUERY on admin.$cmd and returns the OP_REPLY's document,
    checking the reply frame as mongod and mongos 6.0 build it for a command."""
    sock.sendall(op_query("admin.$cmd", command, request_id))
    reply = read_reply(sock)
    assert reply is not None and reply.response_to == request_id, command
    assert op_reply_parts(reply) == (AWAIT_CAPABLE, 0, 0, 1), command
    return reply.document


def without_times(document):
    return {key: value for key, value in document.items() if key not in ("$clusterTime", "operationTime")}


def test_store_answers_is_self_over_op_query(store):
    with connect(store.port) as sock:
        hello = legacy_command(sock, {"isMaster": 1}, 1)
        assert legacy_command(sock, {"_isSelf": 1}, 2) == {"id": hello["topologyVersion"]["processId"], "ok": 1.0}


def test_proxy_answers_every_legacy_handshake_command_in_op_reply(tiers, tmp_path):
    """Every command a driver may send as OP_QUERY while it connects (the Java driver
    3.x sends isMaster, buildinfo, then getlasterror when hello names no
    connectionId) gets an OP_REPLY from the proxy, as from mongos 6.0: the
    handshake and _isSelf answered by the proxy itself, buildinfo by the archive
    (its OP_MSG reply turned back into OP_REPLY, the document unchanged),
    getlasterror refused as every 5.1+ server refuses it, and the connection stays
    open throughout."""
    archive, _ = tiers
    proxy = ProxyProcess(tmp_path / "proxy", proxy_config(*tiers)).start()
    try:
        with connect(archive.port) as sock:
            archive_build_info = without_times(legacy_command(sock, {"buildinfo": 1}, 1))
            archive_is_self = legacy_command(sock, {"_isSelf": 1}, 2)
        with connect(proxy.port) as sock:
            for request_id, name in enumerate(["isMaster", "ismaster", "hello"], start=10):
                hello = legacy_command(sock, {name: 1, "client": {"driver": {"name": "raw", "version": "0"}}},
                                       request_id)
                assert hello["ok"] == 1 and hello["ismaster"] is True and hello["msg"] == "isdbgrid", hello
                assert hello["maxWireVersion"] == 17 and isinstance(hello["connectionId"], int)
            for request_id, name in enumerate(["buildinfo", "buildInfo"], start=20):
                answer = legacy_command(sock, {name: 1}, request_id)
                assert without_times(answer) == archive_build_info
            is_self = legacy_command(sock, {"_isSelf": 1}, 30)
            assert is_self == {"id": hello["topologyVersion"]["processId"], "ok": 1.0}
            assert is_self["id"] != archive_is_self["id"]
            assert list(legacy_command(sock, {"getlasterror": 1}, 31).items()) == unsupported_op_query("getlasterror")
            sasl = legacy_command(sock, {"saslStart": 1, "mechanism": "SCRAM-SHA-256",
                                         "payload": Binary(b"n,,n=nobody,r=abc")}, 32)
            assert sasl["ok"] == 0 and sasl["code"] == 18, sasl  # AuthenticationFailed
            authenticate = legacy_command(sock, {"authenticate": 1, "mechanism": "MONGODB-X509"}, 33)
            assert authenticate["ok"] == 0 and authenticate["codeName"] == "MechanismUnavailable", authenticate
            sock.sendall(op_msg({"ping": 1, "$db": "admin"}, request_id=34))
            reply = read_reply(sock)
            assert reply.opcode == OP_MSG and reply.response_to == 34 and reply.document["ok"] == 1
        assert "closing connection" not in proxy.log_text()
    finally:
        proxy.stop()


def test_proxy_refuses_op_query_commands_as_mongod(tiers, tmp_path):
    proxy = ProxyProcess(tmp_path / "proxy", proxy_config(*tiers)).start()
    try:
        assert_op_query_commands_refused(proxy.port)
        with connect(proxy.port) as sock:
            # saslStart passes the check and is run by the proxy, answering in OP_REPLY.
            sock.sendall(op_query("admin.$cmd", {"saslStart": 1, "mechanism": "SCRAM-SHA-256",
                                                 "payload": Binary(b"n,,n=nobody,r=abc")}, 71))
            reply = read_reply(sock)
            assert reply.opcode == OP_REPLY and reply.response_to == 71
            assert reply.document["code"] == 18, reply.document  # AuthenticationFailed, as from mongod
    finally:
        proxy.stop()


LEGACY_FIND_REFUSAL = [("$err", "OP_QUERY is no longer supported. The client driver may require an upgrade. "
                                "For more details see https://dochub.mongodb.org/core/legacy-opcode-removal"),
                       ("code", 5739101), ("ok", 0.0)]


def assert_legacy_find_refused(port):
    """An OP_QUERY on a collection (a legacy find; also a name without a dot or
    with $cmd past the collection) gets mongod 6.0's OP_REPLY: the QueryFailure
    flag and one {$err, code: 5739101, ok: 0}. The connection stays usable."""
    with connect(port) as sock:
        for request_id, namespace in enumerate(["wire.items", "items", "wire.items.$cmd"], start=20):
            sock.sendall(op_query(namespace, {"a": 1}, request_id))
            reply = read_reply(sock)
            assert reply is not None and reply.opcode == OP_REPLY and reply.response_to == request_id, namespace
            flags, cursor_id, starting_from, returned = struct.unpack_from("<iqii", reply.raw, 16)
            assert (flags, cursor_id, starting_from, returned) == (2, 0, 0, 1)
            assert list(reply.document.items()) == LEGACY_FIND_REFUSAL
            assert isinstance(reply.document["ok"], float)
        sock.sendall(op_msg({"ping": 1, "$db": "admin"}, request_id=30))
        reply = read_reply(sock)
        assert reply.opcode == OP_MSG and reply.response_to == 30 and reply.document["ok"] == 1


def test_op_query_on_a_collection_is_refused_as_mongod_refuses_it(store):
    assert_legacy_find_refused(store.port)


def test_proxy_refuses_op_query_on_a_collection_as_mongod(tiers, tmp_path):
    proxy = ProxyProcess(tmp_path / "proxy", proxy_config(*tiers)).start()
    try:
        assert_legacy_find_refused(proxy.port)
    finally:
        proxy.stop()


@pytest.mark.parametrize("compressor_id", [NOOP, SNAPPY, ZLIB], ids=["noop", "snappy", "zlib"])
def test_compressed_requests_get_replies_compressed_the_same_way(store, compressor_id):
    with connect(store.port) as sock:
        sock.sendall(op_query("admin.$cmd", {"isMaster": 1, "compression": ["snappy", "zlib"]}, 1))
        assert read_reply(sock).document["compression"] == ["snappy", "zlib"]
        documents = [{"_id": i, "text": "the same words again and again " * 4} for i in range(50)]
        sock.sendall(compress(op_msg({"insert": "squeezed", "documents": documents, "$db": "wire"}, 2),
                              compressor_id))
        reply = read_reply(sock)
        assert reply.opcode == OP_COMPRESSED and reply.response_to == 2
        assert decompress_reply(reply)[::2] == (compressor_id, {"n": 50, "ok": 1.0})
        sock.sendall(compress(op_msg({"find": "squeezed", "filter": {"_id": {"$gte": 10}}, "$db": "wire"}, 3),
                              compressor_id))
        reply = read_reply(sock)
        assert reply.opcode == OP_COMPRESSED and reply.response_to == 3
        used, _, found = decompress_reply(reply)
        assert used == compressor_id
        assert [d["_id"] for d in found["cursor"]["firstBatch"]] == list(range(10, 50))
        if compressor_id != NOOP:
            assert len(reply.raw) < 25 + struct.unpack_from("<i", reply.raw, 20)[0]  # it did shrink
        # The handshake itself is never compressed, even when asked to be.
        sock.sendall(compress(op_msg({"hello": 1, "$db": "admin"}, 4), compressor_id))
        reply = read_reply(sock)
        assert reply.opcode == OP_MSG and reply.response_to == 4 and reply.document["isWritablePrimary"] is True


def test_op_msg_checksum_is_checked_when_present(store):
    body = struct.pack("<I", CHECKSUM_PRESENT) + b"\x00" + bson.encode({"ping": 1, "$db": "admin"})
    header = message_header(16 + len(body) + 4, 5, 0, OP_MSG)
    good = header + body + struct.pack("<I", crc32c(header + body))
    with connect(store.port) as sock:
        sock.sendall(good)
        reply = read_reply(sock)
        assert reply.response_to == 5 and reply.document["ok"] == 1
    bad = good[:-4] + struct.pack("<I", crc32c(header + body) ^ 1)
    with connect(store.port) as sock:
        sock.sendall(bad)
        reply = read_reply(sock)
        assert reply is None or (reply.document["ok"] == 0 and reply.document["code"] == 288
                                 and reply.document["codeName"] == "ChecksumMismatch"), reply
    # No checksum where the flag promises one: refused too.
    with connect(store.port) as sock:
        sock.sendall(op_msg_raw(b"", request_id=6, flags=CHECKSUM_PRESENT))
        reply = read_reply(sock)
        assert reply is None or reply.document["ok"] == 0, reply
    assert wire_command(store.port, {"ping": 1, "$db": "admin"})["ok"] == 1


def crc32c(data):
    """CRC-32C (Castagnoli), bit by bit: slow, but only a few hundred bytes."""
    crc = 0xFFFFFFFF
    for byte in data:
        crc ^= byte
        for _ in range(8):
            crc = (crc >> 1) ^ (0x82F63B78 if crc & 1 else 0)
    return crc ^ 0xFFFFFFFF


def test_max_conns_refuses_the_connection_past_the_limit(tmp_path):
    store = StoreProcess(tmp_path, extra_args=["--max-conns", "2"]).start()

    def served_connection():
        """A connection that answered a ping; None while the server still counts
        an earlier one (start()'s readiness probe) that has closed."""
        sock = connect(store.port)
        try:
            sock.sendall(op_msg({"ping": 1, "$db": "admin"}, request_id=1))
            reply = read_reply(sock)
        except (BrokenPipeError, ConnectionResetError):
            reply = None
        if reply is None:
            sock.close()
            return None
        assert reply.document["ok"] == 1
        return sock

    try:
        first = wait_until(served_connection, timeout=10, interval=0.2)
        second = wait_until(served_connection, timeout=10, interval=0.2)
        assert first and second
        with connect(store.port) as third:
            try:
                third.sendall(op_msg({"ping": 1, "$db": "admin"}, request_id=3))
            except (BrokenPipeError, ConnectionResetError):
                pass
            assert read_reply(third) is None  # closed, not answered and not left hanging
        assert wait_until(lambda: "connection refused because too many open connections: 3" in store.log_tail(),
                          timeout=10)
        first.close()
        replacement = wait_until(served_connection, timeout=10, interval=0.2)
        assert replacement
        replacement.close()
        second.close()
    finally:
        store.stop()


def test_hello_in_a_replica_set_names_the_set_and_its_host(replica_store):
    hello = wire_command(replica_store.port, {"hello": 1, "$db": "admin"})
    address = "127.0.0.1:%d" % replica_store.port
    assert hello["setName"] == "rs0" and hello["hosts"] == [address] and hello["primary"] == address
    assert hello["me"] == address and hello["isWritablePrimary"] is True and hello["secondary"] is False
    assert set(hello["topologyVersion"]) == {"processId", "counter"}
    assert isinstance(hello["topologyVersion"]["processId"], bson.ObjectId)


def test_standalone_hello_has_no_set(store):
    hello = wire_command(store.port, {"hello": 1, "$db": "admin"})
    assert "setName" not in hello and "hosts" not in hello
    assert set(hello["topologyVersion"]) == {"processId", "counter"}


def test_host_info_whatsmyuri_and_end_sessions(store):
    with connect(store.port) as sock:
        sock.sendall(op_msg({"whatsmyuri": 1, "$db": "admin"}, request_id=1))
        you = read_reply(sock).document["you"]
        assert you == "127.0.0.1:%d" % sock.getsockname()[1]
    info = wire_command(store.port, {"hostInfo": 1, "$db": "admin"})
    assert info["ok"] == 1 and info["system"]["hostname"] and info["os"]["type"] == "Linux"
    assert info["system"]["numCores"] >= 1 and info["system"]["memSizeMB"] > 0
    ended = wire_command(store.port, {"endSessions": [{"id": Binary(b"\x01" * 16, 4)}], "$db": "admin"})
    assert ended["ok"] == 1
