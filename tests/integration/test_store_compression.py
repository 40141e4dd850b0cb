"""Block compression: snappy by default, zlib and none per collection (create
with storageEngine.wiredTiger.configString "block_compressor=...", as mongod
takes it) and a server default (--compressor). Checked where it matters: the
on-disk size of a compressible collection after a checkpoint (collStats
storageSize, after fsync)."""

import random

import pytest
from pymongo import MongoClient
from pymongo.errors import OperationFailure

from conftest import StoreProcess

DOCUMENTS = 12_000

WORDS = ["order", "customer", "shipped", "pending", "invoice", "warehouse", "express",
         "standard", "paid", "refund", "address", "street", "city", "country"]


def compressible_documents():
    """Order-like documents of repetitive text (about 600 bytes each)."""
    chooser = random.Random(3)
    for i in range(DOCUMENTS):
        yield {"_id": i, "status": chooser.choice(WORDS),
               "note": " ".join(chooser.choice(WORDS) for _ in range(80))}


def create(database, name, compressor):
    if compressor is None:
        database.create_collection(name)
    else:
        database.create_collection(name, storageEngine={
            "wiredTiger": {"configString": "block_compressor=%s" % compressor}})


def storage_sizes(client, compressors):
    """{collection name: storageSize} once each holds the same documents and a
    checkpoint has written them out."""
    database = client.compression
    documents = list(compressible_documents())
    for name, compressor in compressors.items():
        create(database, name, compressor)
        database[name].insert_many(documents)
    client.admin.command("fsync")
    sizes = {}
    for name in compressors:
        stats = database.command("collStats", name)
        assert stats["count"] == DOCUMENTS
        sizes[name] = stats["storageSize"]
    return sizes, stats["size"]


def open_client(store):
    return MongoClient(store.uri, serverSelectionTimeoutMS=10000)


def test_per_collection_compressors_and_snappy_default(client):
    sizes, data_size = storage_sizes(client, {"c_none": "none", "c_snappy": "snappy",
                                              "c_zlib": "zlib", "c_default": None})
    # Uncompressed, the file holds at least the data; snappy shrinks repetitive
    # text a lot and zlib more.
    assert sizes["c_none"] >= data_size * 0.9, sizes
    assert sizes["c_snappy"] * 2 <= sizes["c_none"], sizes
    assert sizes["c_zlib"] * 1.2 <= sizes["c_snappy"], sizes
    # No option: the server default, snappy.
    assert abs(sizes["c_default"] - sizes["c_snappy"]) <= sizes["c_snappy"] * 0.1, sizes
    options = client.compression.c_zlib.options()
    assert options["storageEngine"] == {"wiredTiger": {"configString": "block_compressor=zlib"}}


def test_server_default_compressor(tmp_path):
    store = StoreProcess(tmp_path, extra_args=["--compressor", "zlib"])
    store.start()
    try:
        client = open_client(store)
        sizes, _ = storage_sizes(client, {"c_default": None, "c_snappy": "snappy", "c_none": "none"})
        # The default is now zlib: smaller than snappy; an explicit choice still wins.
        assert sizes["c_default"] * 1.2 <= sizes["c_snappy"], sizes
        assert sizes["c_snappy"] * 2 <= sizes["c_none"], sizes
        client.close()
    finally:
        store.stop()


def test_unknown_compressor_is_refused(client):
    with pytest.raises(OperationFailure) as raised:
        create(client.compression, "c_bad", "lzma")
    assert raised.value.code == 2  # BadValue
    assert "c_bad" not in client.compression.list_collection_names()
