"""A short client session against a thermocline store, as a user would run one."""
import datetime
import sys
import time

import pymongo


def main(uri):
    client = pymongo.MongoClient(uri, serverSelectionTimeoutMS=20000)
    deadline = time.time() + 20
    while True:
        try:
            client.admin.command("ping")
            break
        except pymongo.errors.PyMongoError:
            if time.time() > deadline:
                raise
            time.sleep(0.2)
    orders = client.shop.orders
    now = datetime.datetime.utcnow()
    orders.insert_many(
        {"_id": i, "customer": "c%d" % (i % 7), "total": i * 3 % 100,
         "createdAt": now - datetime.timedelta(days=i)}
        for i in range(1000))
    orders.create_index([("createdAt", pymongo.DESCENDING)])
    recent = list(orders.find({"createdAt": {"$gte": now - datetime.timedelta(days=7)}},
                              {"_id": 1, "total": 1}).sort("createdAt", -1))
    print("server:", client.server_info()["version"], "(thermocline store)")
    print("orders in the last week:", len(recent), [order["_id"] for order in recent])
    plan = orders.find({"createdAt": {"$gte": now - datetime.timedelta(days=7)}}).explain()
    stage = plan["queryPlanner"]["winningPlan"]
    print("plan:", stage["stage"], "->", stage.get("inputStage", {}).get("stage"),
          stage.get("inputStage", {}).get("indexName"))
    print("orders over 90:", orders.count_documents({"total": {"$gt": 90}}))
    print("customers:", orders.distinct("customer"))


if __name__ == "__main__":
    main(sys.argv[1])
