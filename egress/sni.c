/*
 * sni.c - the server name a TLS ClientHello carries, read by OpenSSL.
 *
 * A CONNECT through sandq-egress names its target; the TLS handshake that
 * follows names a server again (SNI), and a server that hosts many names
 * answers for the SNI's. So the proxy holds the job's first bytes until it
 * knows the SNI and refuses a tunnel whose SNI differs from the CONNECT's
 * name (docs/security.md, "Network by allowlist"). Nothing here parses TLS
 * by hand: the bytes go into a memory BIO of a throw-away server-side SSL,
 * whose servername callback (run while OpenSSL processes the ClientHello,
 * before any certificate is needed) records SSL_get_servername() and ends
 * the handshake. The bytes themselves are forwarded untouched: no
 * interception, no certificate of ours.
 */
#include <errno.h>
#include <openssl/err.h>
#include <openssl/ssl.h>
#include <string.h>

#include "proxy.h"

/* What the servername callback found. */
struct sni_seen {
	bool called;		/* the ClientHello was processed that far */
	char *name;		/* where to copy the name */
	size_t len;		/* its size */
	bool found;		/* a host name was there */
};

static SSL_CTX *sni_ctx;
static int sni_idx = -1;

/* Records the ClientHello's host name and stops the handshake there. */
static int
sni_cb(SSL *ssl, int *alert, void *arg)
{
	struct sni_seen *s = SSL_get_ex_data(ssl, sni_idx);
	const char *name = SSL_get_servername(ssl, TLSEXT_NAMETYPE_host_name);

	(void)arg;
	*alert = SSL_AD_UNRECOGNIZED_NAME;
	if (s == NULL)
		return SSL_TLSEXT_ERR_ALERT_FATAL;
	s->called = true;
	if (name != NULL && strlen(name) < s->len) {
		memcpy(s->name, name, strlen(name) + 1);
		s->found = true;
	}
	return SSL_TLSEXT_ERR_ALERT_FATAL;
}

int
egress_sni_init(void)
{
	sni_ctx = SSL_CTX_new(TLS_server_method());
	if (sni_ctx == NULL)
		return -ENOMEM;
	/* Read any ClientHello a client may send: no version floor, no level. */
	SSL_CTX_set_min_proto_version(sni_ctx, 0);
	SSL_CTX_set_security_level(sni_ctx, 0);
	SSL_CTX_set_tlsext_servername_callback(sni_ctx, sni_cb);
	sni_idx = SSL_get_ex_new_index(0, NULL, NULL, NULL, NULL);
	return sni_idx < 0 ? -ENOMEM : 0;
}

void
egress_sni_done(void)
{
	SSL_CTX_free(sni_ctx);
	sni_ctx = NULL;
}

int
egress_sni(const uint8_t *buf, size_t len, char *name, size_t namelen)
{
	struct sni_seen seen = { .name = name, .len = namelen };
	BIO *rbio, *wbio;
	SSL *ssl;
	int rc, err;

	name[0] = '\0';
	if (len == 0)
		return -EAGAIN;
	if (buf[0] != 0x16)	/* not a TLS handshake record: no TLS to check */
		return 0;
	if ((ssl = SSL_new(sni_ctx)) == NULL)
		return -ENOMEM;
	rbio = BIO_new_mem_buf(buf, (int)len);
	wbio = BIO_new(BIO_s_mem());
	if (rbio == NULL || wbio == NULL) {
		BIO_free(rbio);
		BIO_free(wbio);
		SSL_free(ssl);
		return -ENOMEM;
	}
	/* A memory BIO over our bytes: at their end, "retry" (want more). */
	BIO_set_mem_eof_return(rbio, -1);
	SSL_set_bio(ssl, rbio, wbio);
	SSL_set_ex_data(ssl, sni_idx, &seen);
	SSL_set_accept_state(ssl);
	rc = SSL_do_handshake(ssl);
	err = SSL_get_error(ssl, rc);
	SSL_free(ssl);
	ERR_clear_error();
	if (seen.called)
		return seen.found ? 1 : 0;
	if (err == SSL_ERROR_WANT_READ)
		return -EAGAIN;
	return -EPROTO;	/* a handshake record OpenSSL will not read: refused */
}
