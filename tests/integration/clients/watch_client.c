/* A libmongoc change-stream client for tests/integration/test_store_libmongoc_watch.py:
 * mongoc_collection_watch() then mongoc_change_stream_next() until COUNT events, one
 * line per event in canonical extended JSON, so the test sees what libmongoc saw.
 *
 * Usage: watch_client URI DB COLLECTION COUNT [WATCH_OPTIONS_JSON]
 * Output lines (stdout, flushed each):
 *   aggregate JSON  the $changeStream stage of every aggregate libmongoc sends (the
 *                   first, then one per automatic resume), seen through APM
 *   ready           the stream is open: writes made from now on are events
 *   event JSON      one change event
 *   error JSON      {"domain", "code", "message", "reply"}: the stream failed; exit 1
 * Exit status: 0 after COUNT events, 1 on a stream error, 2 on bad usage. */
#include <mongoc/mongoc.h>

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static void print_json_line(const char *tag, const bson_t *document)
{
    char *json = bson_as_canonical_extended_json(document, NULL);
    printf("%s %s\n", tag, json ? json : "{}");
    fflush(stdout);
    bson_free(json);
}

/* APM: the test checks that a resume asks for the events after the last token. */
static void on_command_started(const mongoc_apm_command_started_t *event)
{
    const bson_t *command = mongoc_apm_command_started_get_command(event);
    bson_iter_t iter;
    bson_iter_t stage;
    uint32_t length;
    const uint8_t *data;
    bson_t first_stage;

    if (strcmp(mongoc_apm_command_started_get_command_name(event), "aggregate") != 0) {
        return;
    }
    if (!bson_iter_init_find(&iter, command, "pipeline") || !BSON_ITER_HOLDS_ARRAY(&iter) ||
        !bson_iter_recurse(&iter, &stage) || !bson_iter_next(&stage) ||
        !BSON_ITER_HOLDS_DOCUMENT(&stage)) {
        print_json_line("aggregate", command);
        return;
    }
    bson_iter_document(&stage, &length, &data);
    if (bson_init_static(&first_stage, data, length)) {
        print_json_line("aggregate", &first_stage);
    }
}

static void print_error(const bson_error_t *error, const bson_t *reply)
{
    bson_t report = BSON_INITIALIZER;
    BSON_APPEND_INT32(&report, "domain", (int32_t)error->domain);
    BSON_APPEND_INT32(&report, "code", (int32_t)error->code);
    BSON_APPEND_UTF8(&report, "message", error->message);
    if (reply != NULL) {
        BSON_APPEND_DOCUMENT(&report, "reply", reply);
    }
    print_json_line("error", &report);
    bson_destroy(&report);
}

int main(int argc, char **argv)
{
    int status = 1;
    mongoc_client_t *client = NULL;
    mongoc_collection_t *collection = NULL;
    mongoc_change_stream_t *stream = NULL;
    mongoc_apm_callbacks_t *callbacks = NULL;
    bson_t *options = NULL;
    bson_t pipeline = BSON_INITIALIZER;
    bson_error_t error;
    const bson_t *event;
    const bson_t *error_reply;
    long wanted;
    long seen = 0;
    char *end = NULL;

    if (argc < 5 || argc > 6) {
        fprintf(stderr, "usage: %s URI DB COLLECTION COUNT [WATCH_OPTIONS_JSON]\n", argv[0]);
        return 2;
    }
    wanted = strtol(argv[4], &end, 10);
    if (*end != '\0' || wanted < 0) {
        fprintf(stderr, "COUNT must be a number of events, not \"%s\"\n", argv[4]);
        return 2;
    }
    if (argc == 6) {
        options = bson_new_from_json((const uint8_t *)argv[5], -1, &error);
        if (options == NULL) {
            fprintf(stderr, "WATCH_OPTIONS_JSON: %s\n", error.message);
            return 2;
        }
    }

    mongoc_init();
    client = mongoc_client_new(argv[1]);
    if (client == NULL) {
        fprintf(stderr, "invalid URI \"%s\"\n", argv[1]);
        status = 2;
        goto done;
    }
    mongoc_client_set_error_api(client, MONGOC_ERROR_API_VERSION_2);
    callbacks = mongoc_apm_callbacks_new();
    mongoc_apm_set_command_started_cb(callbacks, on_command_started);
    mongoc_client_set_apm_callbacks(client, callbacks, NULL);

    collection = mongoc_client_get_collection(client, argv[2], argv[3]);
    stream = mongoc_collection_watch(collection, &pipeline, options);
    /* watch() has run the aggregate: a failure to open is reported here. */
    if (mongoc_change_stream_error_document(stream, &error, &error_reply)) {
        print_error(&error, error_reply);
        goto done;
    }
    printf("ready\n");
    fflush(stdout);

    while (seen < wanted) {
        if (mongoc_change_stream_next(stream, &event)) {
            print_json_line("event", event);
            seen++;
        } else if (mongoc_change_stream_error_document(stream, &error, &error_reply)) {
            print_error(&error, error_reply);
            goto done;
        }
        /* Otherwise one awaitData getMore ended empty: ask again. */
    }
    status = 0;

done:
    mongoc_change_stream_destroy(stream);
    mongoc_collection_destroy(collection);
    mongoc_client_destroy(client);
    mongoc_apm_callbacks_destroy(callbacks);
    bson_destroy(options);
    bson_destroy(&pipeline);
    mongoc_cleanup();
    return status;
}
