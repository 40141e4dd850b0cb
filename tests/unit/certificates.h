/* Certificates for the unit tests, made with OpenSSL in the test: a CA and the
 * certificates it signs for a host name or address, each written to a PEM file
 * (certificate, then key) as mongod and drivers take them. Header-only, as the
 * Makefile builds each tests/unit/test_*.c on its own with the library. */
#ifndef TC_TESTS_UNIT_CERTIFICATES_H
#define TC_TESTS_UNIT_CERTIFICATES_H

#include <openssl/evp.h>
#include <stdbool.h>
#include <openssl/pem.h>
#include <openssl/x509.h>
#include <openssl/x509v3.h>
#include <stdio.h>
#include <stdlib.h>

typedef struct test_authority {
    EVP_PKEY *key;
    X509 *certificate;
} test_authority_t;

static void test_certificate_add_extension(X509 *certificate, X509 *issuer, int nid, const char *value)
{
    X509V3_CTX context;
    X509V3_set_ctx(&context, issuer, certificate, NULL, NULL, 0);
    X509_EXTENSION *extension = X509V3_EXT_conf_nid(NULL, &context, nid, value);
    if (extension == NULL || X509_add_ext(certificate, extension, -1) != 1) {
        fprintf(stderr, "certificates.h: cannot add extension %s\n", value);
        abort();
    }
    X509_EXTENSION_free(extension);
}

/* A certificate for common_name with a new P-256 key, valid for an hour; signed
 * by issuer (NULL: by itself). */
static X509 *test_certificate_new(const char *common_name, EVP_PKEY *key, const test_authority_t *issuer)
{
    static long serial = 1;
    X509 *certificate = X509_new();
    X509_set_version(certificate, 2);
    ASN1_INTEGER_set(X509_get_serialNumber(certificate), serial++);
    X509_gmtime_adj(X509_getm_notBefore(certificate), -60);
    X509_gmtime_adj(X509_getm_notAfter(certificate), 3600);
    X509_set_pubkey(certificate, key);
    X509_NAME *name = X509_get_subject_name(certificate);
    X509_NAME_add_entry_by_txt(name, "CN", MBSTRING_ASC, (const unsigned char *)common_name, -1, -1, 0);
    X509_set_issuer_name(certificate, issuer != NULL ? X509_get_subject_name(issuer->certificate) : name);
    return certificate;
}

static void test_certificate_sign(X509 *certificate, EVP_PKEY *key)
{
    if (X509_sign(certificate, key, EVP_sha256()) <= 0) {
        fprintf(stderr, "certificates.h: cannot sign a certificate\n");
        abort();
    }
}

static void test_authority_init(test_authority_t *authority, const char *common_name)
{
    authority->key = EVP_EC_gen("P-256");
    authority->certificate = test_certificate_new(common_name, authority->key, NULL);
    test_certificate_add_extension(authority->certificate, authority->certificate, NID_basic_constraints,
                                   "critical,CA:TRUE");
    test_certificate_add_extension(authority->certificate, authority->certificate, NID_key_usage,
                                   "critical,keyCertSign,cRLSign");
    test_certificate_sign(authority->certificate, authority->key);
}

static void test_authority_cleanup(test_authority_t *authority)
{
    X509_free(authority->certificate);
    EVP_PKEY_free(authority->key);
}

/* The CA's certificate alone (a tlsCAFile). */
static void test_authority_write(const test_authority_t *authority, const char *path)
{
    FILE *file = fopen(path, "w");
    if (file == NULL || PEM_write_X509(file, authority->certificate) != 1) {
        fprintf(stderr, "certificates.h: cannot write %s\n", path);
        abort();
    }
    fclose(file);
}

/* A certificate for common_name, with subjectAltName alt_names ("DNS:localhost,
 * IP:127.0.0.1"; NULL: none), signed by authority, and its key, to path. With a
 * password, the key is encrypted with it. */
static void test_certificate_write(const test_authority_t *authority, const char *common_name, const char *alt_names,
                                   const char *password, const char *path)
{
    EVP_PKEY *key = EVP_EC_gen("P-256");
    X509 *certificate = test_certificate_new(common_name, key, authority);
    if (alt_names != NULL) {
        test_certificate_add_extension(certificate, authority->certificate, NID_subject_alt_name, alt_names);
    }
    test_certificate_sign(certificate, authority->key);
    FILE *file = fopen(path, "w");
    bool written = file != NULL && PEM_write_X509(file, certificate) == 1 &&
                   PEM_write_PrivateKey(file, key, password != NULL ? EVP_aes_256_cbc() : NULL, NULL, 0, NULL,
                                        (void *)password) == 1;
    if (!written) {
        fprintf(stderr, "certificates.h: cannot write %s\n", path);
        abort();
    }
    fclose(file);
    X509_free(certificate);
    EVP_PKEY_free(key);
}

#endif
