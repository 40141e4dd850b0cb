/* The authentication and user management commands, as mongod 6.0 answers them:
 * saslStart and saslContinue (SCRAM-SHA-1, SCRAM-SHA-256, with
 * skipEmptyExchange), logout, createUser, updateUser, dropUser,
 * dropAllUsersFromDatabase, grantRolesToUser, revokeRolesFromUser and usersInfo.
 * Passwords are turned into salted SCRAM credentials here and never stored, shown
 * or logged. */
#include "store/auth_private.h"

#include "common/log.h"

#include <openssl/crypto.h>
#include <openssl/rand.h>
#include <stdlib.h>
#include <string.h>

#define LOG_COMPONENT "ACCESS"
#define MAX_USER_ROLES 256

/* --- SASL ---------------------------------------------------------------------------- */

static bool handle_sasl_start(command_context_t *context, bson_t *reply, bson_error_t *error)
{
    sasl_request_t request;
    bool ok = sasl_parse_start(context->command, &request, error) &&
              auth_sasl_start(context, &request, context->database, false, reply, error);
    sasl_request_cleanup(&request);
    return ok;
}

static bool handle_sasl_continue(command_context_t *context, bson_t *reply, bson_error_t *error)
{
    sasl_request_t request;
    bool ok = sasl_parse_continue(context->command, &request, error) && auth_sasl_continue(context, &request, reply, error);
    sasl_request_cleanup(&request);
    return ok;
}

static bool handle_logout(command_context_t *context, bson_t *reply, bson_error_t *error)
{
    (void)reply, (void)error;
    auth_session_t *session = auth_session_get(context);
    if (session != NULL && session->user.name != NULL && strcmp(session->user.database, context->database) == 0) {
        TC_LOG(TC_LOG_INFO, LOG_COMPONENT, context->connection_id, "%s@%s logged out", session->user.name,
               session->user.database);
        privileges_user_cleanup(&session->user);
    }
    return true;
}

/* --- user documents -------------------------------------------------------------------- */

/* What createUser and updateUser were asked to set. */
typedef struct user_request {
    const char *name;
    const char *password;   /* NULL: not given */
    bool digest_password;
    bool mechanisms_given;
    bool mechanisms[2];     /* indexed by scram_mechanism_t */
    bool roles_given;
    roles_grant_t roles[MAX_USER_ROLES];
    size_t role_count;
    bool custom_data_given;
    bson_t custom_data;
} user_request_t;

static bool parse_roles(const command_context_t *context, const bson_iter_t *field, roles_grant_t *out_roles,
                        size_t *out_count, bson_error_t *error)
{
    bson_iter_t roles;
    *out_count = 0;
    if (!BSON_ITER_HOLDS_ARRAY(field) || !bson_iter_recurse(field, &roles)) {
        return tc_error_set(error, TC_ERR_TYPE_MISMATCH, "BSON field '%s.roles' is the wrong type, expected type 'array'",
                            context->name);
    }
    while (bson_iter_next(&roles)) {
        const char *role = NULL, *database = context->database;
        if (BSON_ITER_HOLDS_UTF8(&roles)) {
            role = bson_iter_utf8(&roles, NULL);
        } else if (BSON_ITER_HOLDS_DOCUMENT(&roles)) {
            bson_iter_t fields;
            bson_iter_recurse(&roles, &fields);
            database = NULL;
            while (bson_iter_next(&fields)) {
                if (strcmp(bson_iter_key(&fields), "role") == 0 && BSON_ITER_HOLDS_UTF8(&fields)) {
                    role = bson_iter_utf8(&fields, NULL);
                } else if (strcmp(bson_iter_key(&fields), "db") == 0 && BSON_ITER_HOLDS_UTF8(&fields)) {
                    database = bson_iter_utf8(&fields, NULL);
                }
            }
            if (role == NULL || database == NULL) {
                return tc_error_set(error, TC_ERR_MISSING_REQUIRED_FIELD,
                                    "Role names must be either strings or objects with \"role\" and \"db\" fields");
            }
        } else {
            return tc_error_set(error, TC_ERR_BAD_VALUE, "Role names must be either strings or objects");
        }
        if (!roles_exists(role, database)) {
            return tc_error_set(error, TC_ERR_ROLE_NOT_FOUND, "Could not find role: %s@%s", role, database);
        }
        if (*out_count == MAX_USER_ROLES) {
            return tc_error_set(error, TC_ERR_BAD_VALUE, "a user may hold at most %d roles", MAX_USER_ROLES);
        }
        out_roles[*out_count].role = role;
        out_roles[*out_count].database = database;
        (*out_count)++;
    }
    return true;
}

static bool parse_user_request(const command_context_t *context, user_request_t *out, bson_error_t *error)
{
    bson_iter_t iter;
    memset(out, 0, sizeof *out);
    out->digest_password = true;
    bson_iter_init(&iter, context->command);
    bson_iter_next(&iter);
    if (!BSON_ITER_HOLDS_UTF8(&iter)) {
        return tc_error_set(error, TC_ERR_TYPE_MISMATCH, "BSON field '%s.%s' is the wrong type, expected type 'string'",
                            context->name, context->name);
    }
    out->name = bson_iter_utf8(&iter, NULL);
    if (out->name[0] == '\0') {
        return tc_error_set(error, TC_ERR_BAD_VALUE, "User document needs 'user' field to be non-empty");
    }
    while (bson_iter_next(&iter)) {
        const char *key = bson_iter_key(&iter);
        if (strcmp(key, "pwd") == 0) {
            if (!BSON_ITER_HOLDS_UTF8(&iter)) {
                return tc_error_set(error, TC_ERR_TYPE_MISMATCH,
                                    "BSON field '%s.pwd' is the wrong type, expected type 'string'", context->name);
            }
            out->password = bson_iter_utf8(&iter, NULL);
        } else if (strcmp(key, "digestPassword") == 0) {
            out->digest_password = bson_iter_as_bool(&iter);
        } else if (strcmp(key, "roles") == 0) {
            out->roles_given = true;
            if (!parse_roles(context, &iter, out->roles, &out->role_count, error)) {
                return false;
            }
        } else if (strcmp(key, "customData") == 0) {
            uint32_t length;
            const uint8_t *data;
            if (!BSON_ITER_HOLDS_DOCUMENT(&iter)) {
                return tc_error_set(error, TC_ERR_TYPE_MISMATCH,
                                    "BSON field '%s.customData' is the wrong type, expected type 'object'",
                                    context->name);
            }
            bson_iter_document(&iter, &length, &data);
            bson_init_static(&out->custom_data, data, length);
            out->custom_data_given = true;
        } else if (strcmp(key, "mechanisms") == 0) {
            bson_iter_t names;
            if (!BSON_ITER_HOLDS_ARRAY(&iter) || !bson_iter_recurse(&iter, &names)) {
                return tc_error_set(error, TC_ERR_TYPE_MISMATCH,
                                    "BSON field '%s.mechanisms' is the wrong type, expected type 'array'",
                                    context->name);
            }
            out->mechanisms_given = true;
            while (bson_iter_next(&names)) {
                scram_mechanism_t mechanism;
                if (!BSON_ITER_HOLDS_UTF8(&names) ||
                    !scram_mechanism_from_name(bson_iter_utf8(&names, NULL), &mechanism)) {
                    return tc_error_set(error, TC_ERR_BAD_VALUE, "Unknown auth mechanism '%s'",
                                        BSON_ITER_HOLDS_UTF8(&names) ? bson_iter_utf8(&names, NULL) : "?");
                }
                out->mechanisms[mechanism] = true;
            }
            if (!out->mechanisms[SCRAM_SHA_1] && !out->mechanisms[SCRAM_SHA_256]) {
                return tc_error_set(error, TC_ERR_BAD_VALUE, "mechanisms field must not be empty");
            }
        }
    }
    if (out->password != NULL && out->password[0] == '\0') {
        return tc_error_set(error, TC_ERR_BAD_VALUE, "Password cannot be empty");
    }
    if (out->password != NULL && strcmp(context->database, "$external") == 0) {
        return tc_error_set(error, TC_ERR_BAD_VALUE,
                            "Cannot set password for users authenticating with external sources");
    }
    return true;
}

/* Credentials for each wanted mechanism from the password (never kept). */
static bool make_credentials(const user_request_t *request, const bool mechanisms[2], scram_credentials_t *out,
                             size_t *out_count, bson_error_t *error)
{
    *out_count = 0;
    for (int m = SCRAM_SHA_1; m <= SCRAM_SHA_256; m++) {
        if (!mechanisms[m]) {
            continue;
        }
        bool ok;
        if (request->digest_password) {
            ok = scram_credentials_generate((scram_mechanism_t)m, request->name, request->password, 0, &out[*out_count],
                                            error);
        } else if (m == SCRAM_SHA_256) {
            return tc_error_set(error, TC_ERR_BAD_VALUE, "Use of SCRAM-SHA-256 requires undigested passwords");
        } else {
            /* digestPassword: false: pwd already is MongoDB's SCRAM-SHA-1 digest. */
            uint8_t salt[SCRAM_MAX_SALT_BYTES];
            size_t salt_length = scram_salt_length(SCRAM_SHA_1);
            ok = RAND_bytes(salt, (int)salt_length) == 1 &&
                 scram_derive_credentials(SCRAM_SHA_1, request->password, salt, salt_length,
                                          SCRAM_SHA_1_DEFAULT_ITERATIONS, &out[*out_count], error);
        }
        if (!ok) {
            return false;
        }
        (*out_count)++;
    }
    return true;
}

static void append_roles(bson_t *out, const roles_grant_t *roles, size_t count)
{
    bson_t array;
    BSON_APPEND_ARRAY_BEGIN(out, "roles", &array);
    for (size_t i = 0; i < count; i++) {
        char key[16];
        const char *key_string;
        bson_t role;
        bson_uint32_to_string((uint32_t)i, &key_string, key, sizeof key);
        BSON_APPEND_DOCUMENT_BEGIN(&array, key_string, &role);
        BSON_APPEND_UTF8(&role, "role", roles[i].role);
        BSON_APPEND_UTF8(&role, "db", roles[i].database);
        bson_append_document_end(&array, &role);
    }
    bson_append_array_end(out, &array);
}

/* A user document in mongod's field order: _id, userId, user, db, credentials,
 * customData, roles. */
static void build_user_document(bson_t *out, const char *name, const char *database, const uint8_t user_id[16],
                                const scram_credentials_t *credentials, size_t credential_count,
                                const bson_t *custom_data, const roles_grant_t *roles, size_t role_count)
{
    char *id = bson_strdup_printf("%s.%s", database, name);
    BSON_APPEND_UTF8(out, "_id", id);
    bson_free(id);
    BSON_APPEND_BINARY(out, "userId", BSON_SUBTYPE_UUID, user_id, 16);
    BSON_APPEND_UTF8(out, "user", name);
    BSON_APPEND_UTF8(out, "db", database);
    scram_credentials_append_document(out, "credentials", credentials, credential_count);
    if (custom_data != NULL) {
        BSON_APPEND_DOCUMENT(out, "customData", custom_data);
    }
    append_roles(out, roles, role_count);
}

static bool check_user_database(const command_context_t *context, bson_error_t *error)
{
    if (strcmp(context->database, "local") == 0) {
        return tc_error_set(error, TC_ERR_BAD_VALUE, "Cannot create users in the local database");
    }
    return true;
}

static bool handle_create_user(command_context_t *context, bson_t *reply, bson_error_t *error)
{
    (void)reply;
    user_request_t *request = bson_malloc(sizeof *request);
    scram_credentials_t credentials[2];
    size_t credential_count = 0;
    bson_t document = BSON_INITIALIZER;
    bool ok = false;

    TC_CHECK(check_user_database(context, error));
    TC_CHECK(parse_user_request(context, request, error));
    if (!request->roles_given) {
        tc_error_set(error, TC_ERR_MISSING_REQUIRED_FIELD, "BSON field 'createUser.roles' is missing but a required field");
        goto done;
    }
    if (request->password == NULL && strcmp(context->database, "$external") != 0) {
        tc_error_set(error, TC_ERR_BAD_VALUE,
                     "Must provide a 'pwd' field for all user documents, except those with '$external' as the "
                     "user's source db");
        goto done;
    }
    if (!request->mechanisms_given) {
        request->mechanisms[SCRAM_SHA_1] = true;
        request->mechanisms[SCRAM_SHA_256] = true;
    }
    if (request->password != NULL) {
        TC_CHECK(make_credentials(request, request->mechanisms, credentials, &credential_count, error));
    }
    uint8_t user_id[16];
    if (RAND_bytes(user_id, sizeof user_id) != 1) {
        tc_error_set(error, TC_ERR_INTERNAL, "cannot draw a random user id");
        goto done;
    }
    user_id[6] = (uint8_t)((user_id[6] & 0x0f) | 0x40); /* a version 4 UUID, as mongod's */
    user_id[8] = (uint8_t)((user_id[8] & 0x3f) | 0x80);
    build_user_document(&document, request->name, context->database, user_id, credentials, credential_count,
                        request->custom_data_given ? &request->custom_data : NULL, request->roles, request->role_count);
    TC_CHECK(auth_users_insert(context, &document, error));
    TC_LOG_ATTRS(TC_LOG_INFO, LOG_COMPONENT, context->connection_id, "created user {user}@{db}",
                 TC_ATTR_STR("user", request->name), TC_ATTR_STR("db", context->database));
    ok = true;
done:
    OPENSSL_cleanse(credentials, sizeof credentials);
    bson_destroy(&document);
    bson_free(request);
    return ok;
}

static bool user_id_of(const bson_t *document, uint8_t out[16])
{
    bson_iter_t iter;
    bson_subtype_t subtype;
    uint32_t length;
    const uint8_t *data;
    if (!bson_iter_init_find(&iter, document, "userId") || !BSON_ITER_HOLDS_BINARY(&iter)) {
        return false;
    }
    bson_iter_binary(&iter, &subtype, &length, &data);
    if (length != 16) {
        return false;
    }
    memcpy(out, data, 16);
    return true;
}

/* Rewrites user@database with the parts given in request, keeping the rest. */
static bool rewrite_user(command_context_t *context, const user_request_t *request, bson_error_t *error)
{
    bson_t current, document = BSON_INITIALIZER;
    bool found = false;
    scram_credentials_t credentials[2];
    size_t credential_count = 0;
    privileges_user_t stored = {0};
    bool ok = false;

    if (!auth_users_find(context->session, request->name, context->database, &current, &found, error)) {
        bson_destroy(&document);
        return false;
    }
    if (!found) {
        bson_destroy(&document);
        return tc_error_set(error, TC_ERR_USER_NOT_FOUND, "Could not find user \"%s\" for db \"%s\"", request->name,
                            context->database);
    }
    bool had[2] = {false, false};
    for (int m = SCRAM_SHA_1; m <= SCRAM_SHA_256; m++) {
        scram_credentials_t existing;
        had[m] = scram_credentials_from_user_document(&current, (scram_mechanism_t)m, &existing);
        if (had[m]) {
            credentials[credential_count++] = existing;
        }
    }
    if (request->password != NULL) {
        bool wanted[2] = {had[SCRAM_SHA_1], had[SCRAM_SHA_256]};
        if (request->mechanisms_given || (!wanted[0] && !wanted[1])) {
            wanted[0] = request->mechanisms_given ? request->mechanisms[0] : true;
            wanted[1] = request->mechanisms_given ? request->mechanisms[1] : true;
        }
        TC_CHECK(make_credentials(request, wanted, credentials, &credential_count, error));
    } else if (request->mechanisms_given) {
        if ((request->mechanisms[0] && !had[0]) || (request->mechanisms[1] && !had[1])) {
            tc_error_set(error, TC_ERR_BAD_VALUE, "mechanisms field must be a subset of previously set mechanisms");
            goto done;
        }
        size_t kept = 0;
        for (size_t i = 0; i < credential_count; i++) {
            if (request->mechanisms[credentials[i].mechanism]) {
                credentials[kept++] = credentials[i];
            }
        }
        credential_count = kept;
    }
    const roles_grant_t *roles = request->roles;
    size_t role_count = request->role_count;
    if (!request->roles_given && privileges_user_from_document(&current, &stored)) {
        roles = stored.grants;
        role_count = stored.grant_count;
    }
    bson_t custom_data;
    const bson_t *custom = NULL;
    if (request->custom_data_given) {
        custom = &request->custom_data;
    } else {
        bson_iter_t iter;
        uint32_t length;
        const uint8_t *data;
        if (bson_iter_init_find(&iter, &current, "customData") && BSON_ITER_HOLDS_DOCUMENT(&iter)) {
            bson_iter_document(&iter, &length, &data);
            if (bson_init_static(&custom_data, data, length)) {
                custom = &custom_data;
            }
        }
    }
    uint8_t user_id[16];
    if (!user_id_of(&current, user_id)) {
        memset(user_id, 0, sizeof user_id);
    }
    build_user_document(&document, request->name, context->database, user_id, credentials, credential_count, custom,
                        roles, role_count);
    TC_CHECK(auth_users_replace(context, request->name, context->database, &document, &found, error));
    if (!found) {
        tc_error_set(error, TC_ERR_USER_NOT_FOUND, "Could not find user \"%s\" for db \"%s\"", request->name,
                     context->database);
        goto done;
    }
    ok = true;
done:
    OPENSSL_cleanse(credentials, sizeof credentials);
    privileges_user_cleanup(&stored);
    bson_destroy(&current);
    bson_destroy(&document);
    return ok;
}

static bool handle_update_user(command_context_t *context, bson_t *reply, bson_error_t *error)
{
    (void)reply;
    user_request_t *request = bson_malloc(sizeof *request);
    bool ok = parse_user_request(context, request, error);
    if (ok && request->password == NULL && !request->roles_given && !request->custom_data_given &&
        !request->mechanisms_given) {
        ok = tc_error_set(error, TC_ERR_BAD_VALUE, "Must specify at least one field to update in updateUser");
    }
    if (ok) {
        ok = rewrite_user(context, request, error);
    }
    if (ok) {
        TC_LOG_ATTRS(TC_LOG_INFO, LOG_COMPONENT, context->connection_id, "updated user {user}@{db}",
                     TC_ATTR_STR("user", request->name), TC_ATTR_STR("db", context->database));
    }
    bson_free(request);
    return ok;
}

/* grantRolesToUser and revokeRolesFromUser: the stored roles plus or minus the given ones. */
static bool change_roles(command_context_t *context, bool grant, bson_error_t *error)
{
    user_request_t *request = bson_malloc(sizeof *request);
    roles_grant_t *changed = bson_malloc(MAX_USER_ROLES * sizeof *changed);
    bson_t current;
    bool found = false;
    privileges_user_t stored = {0};
    bool ok = false;
    TC_CHECK(parse_user_request(context, request, error));
    if (!request->roles_given) {
        tc_error_set(error, TC_ERR_MISSING_REQUIRED_FIELD, "BSON field '%s.roles' is missing but a required field",
                     context->name);
        goto done;
    }
    TC_CHECK(auth_users_find(context->session, request->name, context->database, &current, &found, error));
    if (!found) {
        tc_error_set(error, TC_ERR_USER_NOT_FOUND, "Could not find user \"%s\" for db \"%s\"", request->name,
                     context->database);
        goto done;
    }
    size_t count = 0;
    if (privileges_user_from_document(&current, &stored) && stored.grant_count > 0) { /* none: grants is NULL */
        count = stored.grant_count < MAX_USER_ROLES ? stored.grant_count : MAX_USER_ROLES;
        memcpy(changed, stored.grants, count * sizeof *changed);
    }
    for (size_t i = 0; i < request->role_count; i++) {
        size_t at = count;
        for (size_t j = 0; j < count; j++) {
            if (strcmp(changed[j].role, request->roles[i].role) == 0 &&
                strcmp(changed[j].database, request->roles[i].database) == 0) {
                at = j;
                break;
            }
        }
        if (grant && at == count && count < MAX_USER_ROLES) {
            changed[count++] = request->roles[i];
        } else if (!grant && at < count) {
            memmove(&changed[at], &changed[at + 1], (count - at - 1) * sizeof *changed);
            count--;
        }
    }
    memcpy(request->roles, changed, count * sizeof *changed);
    request->role_count = count;
    request->password = NULL;
    request->mechanisms_given = false;
    ok = rewrite_user(context, request, error);
    bson_destroy(&current);
done:
    privileges_user_cleanup(&stored);
    bson_free(changed);
    bson_free(request);
    return ok;
}

static bool handle_grant_roles(command_context_t *context, bson_t *reply, bson_error_t *error)
{
    (void)reply;
    return change_roles(context, true, error);
}

static bool handle_revoke_roles(command_context_t *context, bson_t *reply, bson_error_t *error)
{
    (void)reply;
    return change_roles(context, false, error);
}

static bool handle_drop_user(command_context_t *context, bson_t *reply, bson_error_t *error)
{
    (void)reply;
    bson_iter_t iter;
    int64_t count;
    bson_iter_init(&iter, context->command);
    bson_iter_next(&iter);
    if (!BSON_ITER_HOLDS_UTF8(&iter)) {
        return tc_error_set(error, TC_ERR_TYPE_MISMATCH,
                            "BSON field 'dropUser.dropUser' is the wrong type, expected type 'string'");
    }
    const char *name = bson_iter_utf8(&iter, NULL);
    if (!auth_users_delete(context, name, context->database, &count, error)) {
        return false;
    }
    if (count == 0) {
        return tc_error_set(error, TC_ERR_USER_NOT_FOUND, "User '%s@%s' not found", name, context->database);
    }
    TC_LOG_ATTRS(TC_LOG_INFO, LOG_COMPONENT, context->connection_id, "dropped user {user}@{db}",
                 TC_ATTR_STR("user", name), TC_ATTR_STR("db", context->database));
    return true;
}

static bool handle_drop_all_users(command_context_t *context, bson_t *reply, bson_error_t *error)
{
    int64_t count;
    if (!auth_users_delete(context, NULL, context->database, &count, error)) {
        return false;
    }
    BSON_APPEND_INT64(reply, "n", count);
    return true;
}

/* --- usersInfo ------------------------------------------------------------------------- */

/* Whom usersInfo asks for: all users of a database, all users, or named ones. */
typedef struct users_query {
    const command_context_t *context;
    bool all_databases;
    const char *whole_database; /* usersInfo: 1 */
    const char *names[64];
    const char *databases[64];
    size_t name_count;
    bson_t **found;
    size_t found_count;
    size_t found_capacity;
} users_query_t;

static bool add_target(users_query_t *query, const bson_iter_t *iter, bson_error_t *error)
{
    if (query->name_count == sizeof query->names / sizeof query->names[0]) {
        return tc_error_set(error, TC_ERR_BAD_VALUE, "usersInfo takes at most %zu users",
                            sizeof query->names / sizeof query->names[0]);
    }
    if (BSON_ITER_HOLDS_UTF8(iter)) {
        query->names[query->name_count] = bson_iter_utf8(iter, NULL);
        query->databases[query->name_count++] = query->context->database;
        return true;
    }
    if (BSON_ITER_HOLDS_DOCUMENT(iter)) {
        bson_iter_t fields;
        const char *user = NULL, *database = NULL;
        bson_iter_recurse(iter, &fields);
        while (bson_iter_next(&fields)) {
            if (strcmp(bson_iter_key(&fields), "forAllDBs") == 0 && bson_iter_as_bool(&fields)) {
                query->all_databases = true;
                return true;
            }
            if (strcmp(bson_iter_key(&fields), "user") == 0 && BSON_ITER_HOLDS_UTF8(&fields)) {
                user = bson_iter_utf8(&fields, NULL);
            } else if (strcmp(bson_iter_key(&fields), "db") == 0 && BSON_ITER_HOLDS_UTF8(&fields)) {
                database = bson_iter_utf8(&fields, NULL);
            }
        }
        if (user == NULL || database == NULL) {
            return tc_error_set(error, TC_ERR_BAD_VALUE,
                                "User name must contain a \"user\" and a \"db\" field");
        }
        query->names[query->name_count] = user;
        query->databases[query->name_count++] = database;
        return true;
    }
    return tc_error_set(error, TC_ERR_BAD_VALUE, "User and role names must be either strings or objects");
}

static bool field_equals(const bson_t *document, const char *field, const char *value)
{
    bson_iter_t iter;
    return bson_iter_init_find(&iter, document, field) && BSON_ITER_HOLDS_UTF8(&iter) &&
           strcmp(bson_iter_utf8(&iter, NULL), value) == 0;
}

static bool users_query_visit(void *visit_context, const bson_t *document)
{
    users_query_t *query = visit_context;
    bool wanted = query->all_databases ||
                  (query->whole_database != NULL && field_equals(document, "db", query->whole_database));
    for (size_t i = 0; !wanted && i < query->name_count; i++) {
        wanted = field_equals(document, "user", query->names[i]) && field_equals(document, "db", query->databases[i]);
    }
    if (wanted) {
        if (query->found_count == query->found_capacity) {
            query->found_capacity = query->found_capacity == 0 ? 8 : query->found_capacity * 2;
            query->found = bson_realloc(query->found, query->found_capacity * sizeof *query->found);
        }
        query->found[query->found_count++] = bson_copy(document);
    }
    return true;
}

static int compare_ids(const void *left, const void *right)
{
    bson_iter_t a, b;
    const bson_t *first = *(bson_t *const *)left;
    const bson_t *second = *(bson_t *const *)right;
    const char *first_id = bson_iter_init_find(&a, first, "_id") && BSON_ITER_HOLDS_UTF8(&a) ? bson_iter_utf8(&a, NULL) : "";
    const char *second_id = bson_iter_init_find(&b, second, "_id") && BSON_ITER_HOLDS_UTF8(&b) ? bson_iter_utf8(&b, NULL) : "";
    return strcmp(first_id, second_id);
}

/* A user as usersInfo shows it: the document without its credentials (unless
 * showCredentials), then the mechanisms it has credentials for. */
static void append_user_info(bson_t *out, const char *key, const bson_t *document, bool show_credentials)
{
    bson_t user, mechanisms;
    bson_iter_t iter;
    uint32_t index = 0;
    BSON_APPEND_DOCUMENT_BEGIN(out, key, &user);
    bson_iter_init(&iter, document);
    while (bson_iter_next(&iter)) {
        if (strcmp(bson_iter_key(&iter), "credentials") == 0 && !show_credentials) {
            continue;
        }
        bson_append_iter(&user, NULL, -1, &iter);
    }
    BSON_APPEND_ARRAY_BEGIN(&user, "mechanisms", &mechanisms);
    for (int m = SCRAM_SHA_1; m <= SCRAM_SHA_256; m++) {
        scram_credentials_t credentials;
        if (scram_credentials_from_user_document(document, (scram_mechanism_t)m, &credentials)) {
            char index_key[16];
            const char *index_string;
            bson_uint32_to_string(index++, &index_string, index_key, sizeof index_key);
            BSON_APPEND_UTF8(&mechanisms, index_string, scram_mechanism_name((scram_mechanism_t)m));
        }
    }
    bson_append_array_end(&user, &mechanisms);
    bson_append_document_end(out, &user);
}

static bool handle_users_info(command_context_t *context, bson_t *reply, bson_error_t *error)
{
    users_query_t query = {.context = context};
    bson_iter_t iter, element;
    bool show_credentials = false;
    bool ok = false;
    bson_iter_init(&iter, context->command);
    bson_iter_next(&iter);
    if (BSON_ITER_HOLDS_NUMBER(&iter)) {
        query.whole_database = context->database;
    } else if (BSON_ITER_HOLDS_ARRAY(&iter)) {
        bson_iter_recurse(&iter, &element);
        while (bson_iter_next(&element)) {
            TC_CHECK(add_target(&query, &element, error));
        }
    } else {
        TC_CHECK(add_target(&query, &iter, error));
    }
    if (bson_iter_init_find(&iter, context->command, "showCredentials")) {
        show_credentials = bson_iter_as_bool(&iter);
    }
    TC_CHECK(auth_users_scan(context->session, users_query_visit, &query, error));
    if (query.found_count > 1) {
        qsort(query.found, query.found_count, sizeof *query.found, compare_ids);
    }
    bson_t users;
    BSON_APPEND_ARRAY_BEGIN(reply, "users", &users);
    for (size_t i = 0; i < query.found_count; i++) {
        char key[16];
        const char *key_string;
        bson_uint32_to_string((uint32_t)i, &key_string, key, sizeof key);
        append_user_info(&users, key_string, query.found[i], show_credentials);
    }
    bson_append_array_end(reply, &users);
    ok = true;
done:
    for (size_t i = 0; i < query.found_count; i++) {
        bson_destroy(query.found[i]);
    }
    bson_free(query.found);
    return ok;
}

const command_definition_t auth_commands[] = {
    {"saslStart", handle_sasl_start},
    {"saslContinue", handle_sasl_continue},
    {"logout", handle_logout},
    {"createUser", handle_create_user},
    {"updateUser", handle_update_user},
    {"dropUser", handle_drop_user},
    {"dropAllUsersFromDatabase", handle_drop_all_users},
    {"grantRolesToUser", handle_grant_roles},
    {"revokeRolesFromUser", handle_revoke_roles},
    {"usersInfo", handle_users_info},
    {NULL, NULL},
};
