"""Document validation as a pymongo application meets it against `thermocline
store`: create's and collMod's validator, validationLevel and validationAction,
every write checked (insert, update with operators, a replacement or a
pipeline, upsert, findAndModify), bypassDocumentValidation, and MongoDB 6.0's
DocumentValidationFailure (121) with its errInfo."""

import pytest
from bson import SON, Decimal128
from pymongo import MongoClient
from pymongo.errors import BulkWriteError, OperationFailure, WriteError

DB_NAME = "validation"

# An order needs a status among three and a non-negative total.
ORDER_RULES = {"status": {"$in": ["draft", "paid", "shipped"]}, "total": {"$gte": 0}}


@pytest.fixture
def db(client):
    return client[DB_NAME]


@pytest.fixture
def orders(db):
    db.create_collection("orders", validator=ORDER_RULES)
    return db["orders"]


def failure(database, command):
    with pytest.raises(OperationFailure) as raised:
        database.command(command)
    return raised.value


def collection_options(db, name):
    return next(db.list_collections(filter={"name": name}))["options"]


def test_create_records_the_validator_and_listcollections_shows_it(db):
    db.create_collection("orders", validator=ORDER_RULES, validationLevel="moderate", validationAction="warn")
    options = collection_options(db, "orders")
    assert options["validator"] == ORDER_RULES
    assert options["validationLevel"] == "moderate"
    assert options["validationAction"] == "warn"


def test_an_insert_the_validator_refuses_is_a_write_error_121_with_errinfo(orders):
    orders.insert_one({"_id": 1, "status": "paid", "total": 10})
    with pytest.raises(WriteError) as raised:
        orders.insert_one({"_id": 2, "status": "lost", "total": 10})
    error = raised.value.details
    assert raised.value.code == 121
    assert error["errmsg"] == "Document failed validation"
    assert error["errInfo"]["failingDocumentId"] == 2
    details = error["errInfo"]["details"]
    # Two top-level fields: an implicit $and, naming the clause that failed.
    assert details["operatorName"] == "$and"
    assert details["clausesNotSatisfied"] == [{
        "index": 0,
        "details": {"operatorName": "$in", "specifiedAs": {"status": {"$in": ["draft", "paid", "shipped"]}},
                    "reason": "comparison failed", "consideredValue": "lost"}}]
    assert [d["_id"] for d in orders.find()] == [1]


def test_an_ordered_batch_stops_at_the_invalid_document_an_unordered_one_goes_on(orders):
    with pytest.raises(BulkWriteError) as raised:
        orders.insert_many([{"_id": 1, "status": "paid", "total": 1}, {"_id": 2, "status": "paid"},
                            {"_id": 3, "status": "paid", "total": 3}])
    assert [(e["index"], e["code"]) for e in raised.value.details["writeErrors"]] == [(1, 121)]
    details = raised.value.details["writeErrors"][0]["errInfo"]["details"]
    assert details["clausesNotSatisfied"][0]["index"] == 1
    assert details["clausesNotSatisfied"][0]["details"]["reason"] == "field was missing"
    with pytest.raises(BulkWriteError):
        orders.insert_many([{"_id": 4, "status": "x", "total": 1}, {"_id": 5, "status": "paid", "total": 5}],
                           ordered=False)
    assert sorted(d["_id"] for d in orders.find()) == [1, 5]


def test_updates_of_every_shape_are_checked(db, orders):
    orders.insert_one({"_id": 1, "status": "paid", "total": 10})
    with pytest.raises(WriteError) as raised:
        orders.update_one({"_id": 1}, {"$set": {"total": -1}})
    assert raised.value.code == 121
    assert raised.value.details["errInfo"]["failingDocumentId"] == 1
    with pytest.raises(WriteError) as raised:
        orders.replace_one({"_id": 1}, {"status": "paid"})
    assert raised.value.code == 121
    with pytest.raises(WriteError) as raised:
        orders.update_one({"_id": 1}, [{"$set": {"status": {"$concat": ["$status", "!"]}}}])
    assert raised.value.code == 121
    assert orders.find_one({"_id": 1}) == {"_id": 1, "status": "paid", "total": 10}
    # What stays valid is written.
    assert orders.update_one({"_id": 1}, {"$set": {"status": "shipped"}}).modified_count == 1
    assert orders.update_one({"_id": 1}, [{"$set": {"total": {"$add": ["$total", 5]}}}]).modified_count == 1
    assert orders.find_one({"_id": 1}) == {"_id": 1, "status": "shipped", "total": 15}


def test_an_upsert_is_checked_as_an_insert(orders):
    with pytest.raises(WriteError) as raised:
        orders.update_one({"_id": 7}, {"$set": {"status": "paid"}}, upsert=True)
    assert raised.value.code == 121
    assert raised.value.details["errInfo"]["failingDocumentId"] == 7
    assert orders.count_documents({}) == 0
    orders.update_one({"_id": 7}, {"$set": {"status": "paid", "total": 0}}, upsert=True)
    assert orders.find_one({"_id": 7}) == {"_id": 7, "status": "paid", "total": 0}


def test_find_and_modify_fails_the_command_with_121_and_errinfo(db, orders):
    orders.insert_one({"_id": 1, "status": "paid", "total": 10})
    error = failure(db, SON([("findAndModify", "orders"), ("query", {"_id": 1}),
                             ("update", {"$set": {"status": "refunded"}})]))
    assert error.code == 121
    assert error.details["codeName"] == "DocumentValidationFailure"
    assert error.details["errmsg"] == "Document failed validation"
    assert error.details["errInfo"]["failingDocumentId"] == 1
    assert error.details["errInfo"]["details"]["operatorName"] == "$and"
    error = failure(db, SON([("findAndModify", "orders"), ("query", {"_id": 2}),
                             ("update", {"$set": {"status": "paid"}}), ("upsert", True)]))
    assert error.code == 121
    assert orders.find_one({"_id": 1})["status"] == "paid"
    assert orders.count_documents({}) == 1
    assert orders.find_one_and_update({"_id": 1}, {"$set": {"status": "shipped"}})["status"] == "paid"


def test_bypass_document_validation_skips_the_check(db, orders):
    orders.insert_one({"_id": 1, "status": "lost"}, bypass_document_validation=True)
    orders.update_one({"_id": 1}, {"$set": {"total": -5}}, bypass_document_validation=True)
    db.command(SON([("findAndModify", "orders"), ("query", {"_id": 1}), ("update", {"$set": {"note": 1}}),
                    ("bypassDocumentValidation", True)]))
    assert orders.find_one({"_id": 1}) == {"_id": 1, "status": "lost", "total": -5, "note": 1}
    # false is the default: checked.
    with pytest.raises(WriteError):
        orders.insert_one({"_id": 2}, bypass_document_validation=False)


def test_deletes_are_never_checked(orders):
    orders.insert_one({"_id": 1, "status": "lost"}, bypass_document_validation=True)
    assert orders.delete_one({"_id": 1}).deleted_count == 1


def test_moderate_leaves_updates_of_already_invalid_documents_unchecked(db):
    db.create_collection("orders", validator=ORDER_RULES, validationLevel="moderate")
    orders = db["orders"]
    orders.insert_one({"_id": "old", "status": "legacy"}, bypass_document_validation=True)
    orders.insert_one({"_id": "new", "status": "paid", "total": 1})
    orders.update_one({"_id": "old"}, {"$set": {"note": "still legacy"}})
    assert orders.find_one({"_id": "old"})["note"] == "still legacy"
    # A valid document may not become invalid, and inserts are always checked.
    with pytest.raises(WriteError) as raised:
        orders.update_one({"_id": "new"}, {"$set": {"status": "legacy"}})
    assert raised.value.code == 121
    with pytest.raises(WriteError):
        orders.insert_one({"_id": "newer", "status": "legacy"})


def test_validation_level_off_checks_nothing(db):
    db.create_collection("orders", validator=ORDER_RULES, validationLevel="off")
    db["orders"].insert_one({"_id": 1, "status": "anything"})
    assert db["orders"].count_documents({}) == 1


def test_validation_action_warn_accepts_the_document(db):
    db.create_collection("orders", validator=ORDER_RULES, validationAction="warn")
    db["orders"].insert_one({"_id": 1, "status": "lost"})
    db["orders"].update_one({"_id": 1}, {"$set": {"total": -1}})
    assert db["orders"].find_one({"_id": 1}) == {"_id": 1, "status": "lost", "total": -1}


def test_validation_action_warn_logs_what_it_accepted(store, db):
    db.create_collection("orders", validator=ORDER_RULES, validationAction="warn")
    db["orders"].insert_one({"_id": "logged-order", "status": "lost"})
    warnings = [line for line in store.log_text().splitlines() if "Document would fail validation" in line]
    assert len(warnings) == 1, store.log_tail()
    assert "logged-order" in warnings[0] and "validation.orders" in warnings[0] and "$and" in warnings[0]


def test_collmod_sets_changes_and_removes_the_validator(db):
    db["orders"].insert_one({"_id": 1, "status": "lost"})
    db.command(SON([("collMod", "orders"), ("validator", ORDER_RULES)]))
    assert collection_options(db, "orders")["validator"] == ORDER_RULES
    # What was already there stays; new writes are checked.
    assert db["orders"].count_documents({}) == 1
    with pytest.raises(WriteError):
        db["orders"].insert_one({"_id": 2, "status": "lost"})
    db.command(SON([("collMod", "orders"), ("validationAction", "warn")]))
    db["orders"].insert_one({"_id": 2, "status": "lost"})
    db.command(SON([("collMod", "orders"), ("validationAction", "error"), ("validator", {})]))
    db["orders"].insert_one({"_id": 3, "status": "lost"})
    assert db["orders"].count_documents({}) == 3


def test_an_expr_validator_names_expr_in_errinfo(db):
    db.create_collection("budgets", validator={"$expr": {"$lte": ["$spent", "$budget"]}})
    db["budgets"].insert_one({"_id": 1, "budget": 10, "spent": 5})
    with pytest.raises(WriteError) as raised:
        db["budgets"].insert_one({"_id": 2, "budget": 10, "spent": 50})
    details = raised.value.details["errInfo"]["details"]
    assert details["operatorName"] == "$expr"
    assert details["specifiedAs"] == {"$expr": {"$lte": ["$spent", "$budget"]}}
    assert details["reason"] == "expression did not match"


def test_or_and_type_clauses_in_errinfo(db):
    db.create_collection("people", validator={"$or": [{"email": {"$type": "string"}}, {"phone": {"$exists": True}}]})
    with pytest.raises(WriteError) as raised:
        db["people"].insert_one({"_id": 1, "email": 42})
    details = raised.value.details["errInfo"]["details"]
    assert details["operatorName"] == "$or"
    assert details["clausesNotSatisfied"] == [
        {"index": 0, "details": {"operatorName": "$type", "specifiedAs": {"email": {"$type": "string"}},
                                 "reason": "type did not match", "consideredValue": 42, "consideredType": "int"}},
        {"index": 1, "details": {"operatorName": "$exists", "specifiedAs": {"phone": {"$exists": True}}}}]


def test_bad_validators_and_options_are_refused_as_mongod_refuses_them(db):
    error = failure(db, SON([("create", "c"), ("validator", {"a": {"$bogus": 1}})]))
    assert (error.code, error.details["codeName"]) == (2, "BadValue")
    error = failure(db, SON([("create", "c"), ("validator", 5)]))
    assert (error.code, error.details["codeName"]) == (14, "TypeMismatch")
    error = failure(db, SON([("create", "c"), ("validationLevel", "sometimes")]))
    assert (error.code, error.details["codeName"]) == (2, "BadValue")
    assert error.details["errmsg"] == ("Enumeration value 'sometimes' for field 'create.validationLevel' "
                                       "is not a valid value.")
    error = failure(db, SON([("create", "c"), ("validationAction", 1)]))
    assert error.code == 14
    assert "c" not in db.list_collection_names()
    db.create_collection("c")
    error = failure(db, SON([("collMod", "c"), ("validationAction", "ignore")]))
    assert error.details["errmsg"] == "Enumeration value 'ignore' for field 'collMod.validationAction' is not a valid value."
    error = failure(db, SON([("collMod", "c"), ("validator", {"$where": "true"})]))
    assert error.code == 2
    assert "validator" not in collection_options(db, "c")


STUDENT_SCHEMA = {"$jsonSchema": {
    "bsonType": "object",
    "required": ["name", "year", "gpa"],
    "properties": {
        "name": {"bsonType": "string", "description": "must be a string and is required"},
        "year": {"bsonType": "int", "minimum": 2017, "maximum": 3017},
        "gpa": {"bsonType": ["double"], "minimum": 0},
        "major": {"enum": ["Math", "English", "Computer Science", "History", None]},
    },
}}


def test_json_schema_validator(db):
    db.create_collection("students", validator=STUDENT_SCHEMA)
    assert collection_options(db, "students")["validator"] == STUDENT_SCHEMA
    students = db["students"]
    students.insert_one({"_id": 1, "name": "Alice", "year": 2019, "major": "History", "gpa": 3.0})
    with pytest.raises(WriteError) as raised:
        students.insert_one({"_id": 2, "name": "Bob", "year": 2019, "major": "History", "gpa": 3})
    assert raised.value.code == 121
    assert raised.value.details["errInfo"] == {"failingDocumentId": 2, "details": {
        "operatorName": "$jsonSchema",
        "schemaRulesNotSatisfied": [{"operatorName": "properties", "propertiesNotSatisfied": [
            {"propertyName": "gpa", "details": [{
                "operatorName": "bsonType", "specifiedAs": {"bsonType": ["double"]},
                "reason": "type did not match", "consideredValue": 3, "consideredType": "int"}]}]}]}}
    with pytest.raises(WriteError) as raised:
        students.update_one({"_id": 1}, {"$unset": {"year": ""}, "$set": {"major": "Art"}})
    rules = raised.value.details["errInfo"]["details"]["schemaRulesNotSatisfied"]
    # mongod's parser order: properties before required, whatever the written one.
    assert [rule["operatorName"] for rule in rules] == ["properties", "required"]
    assert rules[1]["missingProperties"] == ["year"]
    assert students.find_one({"_id": 1})["major"] == "History"


# An application's schema: every kind of keyword mongod's $jsonSchema has.
PRODUCT_SCHEMA = {"$jsonSchema": {
    "title": "Product",
    "required": ["_id", "sku", "tags"],
    "properties": {
        "_id": {},
        "sku": {"type": "string", "pattern": "^[A-Z]{3}-[0-9]+$", "maxLength": 12},
        "price": {"bsonType": "decimal", "minimum": 0},
        "step": {"multipleOf": 0.5},
        "tags": {"bsonType": "array", "minItems": 1, "uniqueItems": True, "items": {"type": "string", "minLength": 2}},
        "dimensions": {"bsonType": "object", "minProperties": 1, "maxProperties": 3,
                       "additionalProperties": {"bsonType": "number"}},
        "status": {"oneOf": [{"enum": ["active", "retired"]}, {"bsonType": "null"}]},
        "origin": {"anyOf": [{"type": "string"}, {"bsonType": "object", "required": ["country"]}]},
        "pair": {"items": [{"type": "string"}, {"type": "number"}], "additionalItems": False},
        "note": {"not": {"type": "string", "maxLength": 0}, "description": "never empty"},
        "discount": {"minimum": 0, "maximum": 100, "exclusiveMaximum": True},
    },
    "patternProperties": {"^x_": {"type": "string"}},
    "additionalProperties": False,
    "dependencies": {"discount": ["price"]},
}}


def test_json_schema_keywords_of_every_kind(db):
    db.create_collection("products", validator=PRODUCT_SCHEMA)
    assert collection_options(db, "products")["validator"] == PRODUCT_SCHEMA
    products = db["products"]
    good = {"_id": 1, "sku": "ABC-12", "price": Decimal128("9.5"), "step": 1.5, "tags": ["ab", "cd"],
            "dimensions": {"w": 2, "h": 3.5}, "status": None, "origin": {"country": "NO"},
            "pair": ["w", 2], "note": "x", "x_color": "red"}
    products.insert_one(good)
    cases = [
        ({"sku": "abc-12"}, {"operatorName": "properties", "propertiesNotSatisfied": [{"propertyName": "sku",
         "details": [{"operatorName": "pattern", "specifiedAs": {"pattern": "^[A-Z]{3}-[0-9]+$"},
                      "reason": "regular expression did not match", "consideredValue": "abc-12"}]}]}),
        ({"tags": ["ab", "ab", "c"]}, {"operatorName": "properties", "propertiesNotSatisfied": [{
            "propertyName": "tags", "details": [
                {"operatorName": "uniqueItems", "specifiedAs": {"uniqueItems": True}, "reason": "found a duplicate item",
                 "consideredValue": ["ab", "ab", "c"], "duplicatedValue": "ab"},
                {"operatorName": "items", "reason": "At least one item did not match the sub-schema", "itemIndex": 2,
                 "details": [{"operatorName": "minLength", "specifiedAs": {"minLength": 2},
                              "reason": "specified string length was not satisfied", "consideredValue": "c"}]}]}]}),
        ({"step": 1.25}, {"operatorName": "properties", "propertiesNotSatisfied": [{"propertyName": "step", "details": [
            {"operatorName": "multipleOf", "specifiedAs": {"multipleOf": 0.5},
             "reason": "considered value is not a multiple of the specified value", "consideredValue": 1.25}]}]}),
        ({"note": ""}, {"operatorName": "properties", "propertiesNotSatisfied": [{
            "propertyName": "note", "description": "never empty",
            "details": [{"operatorName": "not", "reason": "child expression matched"}]}]}),
        ({"status": "lost"}, {"operatorName": "properties", "propertiesNotSatisfied": [{"propertyName": "status",
         "details": [{"operatorName": "oneOf", "schemasNotSatisfied": [
             {"index": 0, "details": [{"operatorName": "enum", "specifiedAs": {"enum": ["active", "retired"]},
                                       "reason": "value was not found in enum", "consideredValue": "lost"}]},
             {"index": 1, "details": [{"operatorName": "bsonType", "specifiedAs": {"bsonType": "null"},
                                       "reason": "type did not match", "consideredValue": "lost",
                                       "consideredType": "string"}]}]}]}]}),
        ({"x_size": 3}, {"operatorName": "patternProperties", "details": [{"propertyName": "x_size",
         "regexMatched": "^x_", "details": [{"operatorName": "type", "specifiedAs": {"type": "string"},
                                            "reason": "type did not match", "consideredValue": 3,
                                            "consideredType": "int"}]}]}),
    ]
    without_price = {key: value for key, value in good.items() if key != "price"}
    for number, (change, rule) in enumerate(cases, start=2):
        with pytest.raises(WriteError) as raised:
            products.insert_one(dict(good, _id=number, **change))
        assert raised.value.code == 121
        assert raised.value.details["errInfo"] == {"failingDocumentId": number, "details": {
            "operatorName": "$jsonSchema", "title": "Product", "schemaRulesNotSatisfied": [rule]}}, change
    with pytest.raises(WriteError) as raised:
        products.insert_one(dict(without_price, _id=100, discount=5))
    assert raised.value.details["errInfo"]["details"]["schemaRulesNotSatisfied"] == [{
        "operatorName": "dependencies", "failingDependencies": [
            {"conditionalProperty": "discount", "missingProperties": ["price"]}]}]
    with pytest.raises(WriteError) as raised:
        products.insert_one(dict(good, _id=101, discount=100))
    assert raised.value.details["errInfo"]["details"]["schemaRulesNotSatisfied"] == [{
        "operatorName": "properties", "propertiesNotSatisfied": [{"propertyName": "discount", "details": [{
            "operatorName": "maximum", "specifiedAs": {"maximum": 100, "exclusiveMaximum": True},
            "reason": "comparison failed", "consideredValue": 100}]}]}]
    assert products.count_documents({}) == 1


def test_json_schema_in_a_find_filter(db):
    db.items.insert_many([{"_id": 1, "name": "a", "qty": 5}, {"_id": 2, "name": 7},
                          {"_id": 3, "qty": -1}, {"_id": 4, "name": "long name", "qty": 2}])
    schema = {"required": ["name"], "properties": {"name": {"type": "string", "maxLength": 4},
                                                   "qty": {"minimum": 0}}}
    assert [d["_id"] for d in db.items.find({"$jsonSchema": schema}).sort("_id", 1)] == [1]
    assert [d["_id"] for d in db.items.find({"$nor": [{"$jsonSchema": schema}]}).sort("_id", 1)] == [2, 3, 4]
    assert db.items.count_documents({"$jsonSchema": {"properties": {"qty": {"minimum": 0}}}}) == 3
    assert db.items.delete_many({"$jsonSchema": {"required": ["qty"], "properties": {"qty": {"maximum": 0}}}}
                                ).deleted_count == 1
    with pytest.raises(OperationFailure) as raised:
        db.items.find_one({"$jsonSchema": {"type": "integer"}})
    assert (raised.value.code, raised.value.details["errmsg"]) == (9, "$jsonSchema type 'integer' is not currently supported.")


def test_json_schema_errors_are_mongods(db):
    for schema, code, message in [
            ({"properties": {"name": {"maxLength": -1}}}, 9, "Expected a positive number in: maxLength: -1"),
            ({"requird": ["a"]}, 9, "Unknown $jsonSchema keyword: requird"),
            ({"format": "email"}, 9, "$jsonSchema keyword 'format' is not currently supported"),
            ({"anyOf": []}, 2, "$jsonSchema keyword 'anyOf' must be a non-empty array"),
            ({"type": "object", "bsonType": "object"}, 9,
             "Cannot specify both $jsonSchema keywords 'type' and 'bsonType'")]:
        error = failure(db, SON([("create", "c"), ("validator", {"$jsonSchema": schema})]))
        assert (error.code, error.details["errmsg"]) == (code, message), schema
    # Client-side field level encryption's keywords: named, and refused.
    error = failure(db, SON([("create", "c"), ("validator", {"$jsonSchema": {"properties": {"ssn": {"encrypt": {}}}}})]))
    assert (error.code, error.details["codeName"]) == (115, "CommandNotSupported")
    assert "encrypt" in error.details["errmsg"]
    assert "c" not in db.list_collection_names()


def test_json_schema_and_expr_where_mongod_bans_them(db):
    """mongod's parser bans its special features in a $pull condition, an
    arrayFilters entry, an $elemMatch projection and the query of a positional
    projection: QueryFeatureNotAllowed 224, and nothing written."""
    db.items.insert_one({"_id": 1, "tags": [{"n": 1}, {"n": 2}]})
    for update, filters, message in [
            ({"$pull": {"tags": {"$jsonSchema": {"required": ["n"]}}}}, None,
             "$jsonSchema is not allowed in this context"),
            ({"$pull": {"tags": {"$expr": {"$eq": ["$n", 1]}}}}, None, "$expr is not allowed in this context"),
            ({"$set": {"tags.$[t].seen": True}}, [{"t.n": 1, "$jsonSchema": {}}],
             "Error parsing array filter :: caused by :: $jsonSchema is not allowed in this context")]:
        with pytest.raises(WriteError) as raised:
            db.items.update_one({"_id": 1}, update, array_filters=filters)
        assert (raised.value.code, raised.value.details["errmsg"]) == (224, message), update
    assert db.items.find_one({"_id": 1}) == {"_id": 1, "tags": [{"n": 1}, {"n": 2}]}
    for query, projection in [({}, {"tags": {"$elemMatch": {"$jsonSchema": {"required": ["n"]}}}}),
                              ({"tags.n": 1, "$expr": {"$eq": ["$_id", 1]}}, {"tags.$": 1})]:
        with pytest.raises(OperationFailure) as raised:
            db.items.find_one(query, projection)
        assert (raised.value.code, raised.value.details["codeName"]) == (224, "QueryFeatureNotAllowed")
    assert db.items.find_one({"tags.n": 2, "$expr": {"$eq": ["$_id", 1]}})["_id"] == 1  # a plain find takes both


def test_the_validator_survives_a_restart(store, client, db):
    db.create_collection("orders", validator=ORDER_RULES, validationLevel="moderate")
    client.close()
    store.stop()
    store.restart()
    with MongoClient(store.uri, serverSelectionTimeoutMS=10000) as again:
        options = collection_options(again[DB_NAME], "orders")
        assert (options["validator"], options["validationLevel"]) == (ORDER_RULES, "moderate")
        with pytest.raises(WriteError) as raised:
            again[DB_NAME]["orders"].insert_one({"_id": 1, "status": "lost"})
        assert raised.value.code == 121


def test_out_and_merge_write_through_the_target_validator(db, orders):
    db["incoming"].insert_many([{"_id": 1, "status": "paid", "total": 1}, {"_id": 2, "status": "lost", "total": 2}])
    # $out replaces the target keeping its options: its validator checks what is written.
    with pytest.raises(OperationFailure) as raised:
        list(db["incoming"].aggregate([{"$out": "orders"}]))
    assert raised.value.code == 121
    assert raised.value.details["errInfo"]["failingDocumentId"] == 2
    with pytest.raises(OperationFailure) as raised:
        list(db["incoming"].aggregate([{"$merge": {"into": "orders"}}]))
    assert raised.value.code == 121
    list(db["incoming"].aggregate([{"$merge": {"into": "orders"}}], bypassDocumentValidation=True))
    assert sorted(d["_id"] for d in orders.find()) == [1, 2]
    list(db["incoming"].aggregate([{"$out": "orders"}], bypassDocumentValidation=True))
    assert collection_options(db, "orders")["validator"] == ORDER_RULES
