/* http_client: a small blocking HTTP/1.1 client for the CLI's server mode.
 *
 * One request per connection (Connection: close), the whole answer read
 * into memory (capped), no TLS, no redirects: it talks to heapstore-server
 * on its one port. HEAPSTORE_URL may be tcp://H:P, http://H:P or H:P; the
 * port defaults to 7459. It may also list several of them separated by
 * commas (front ends of one store, as the collector takes them): a request
 * goes to the first that accepts a connection, in the order listed.
 */
#ifndef HS_HTTP_CLIENT_H
#define HS_HTTP_CLIENT_H

#include <stddef.h>

typedef struct hs_http_answer {
    int status;
    char content_type[128];
    char *body; /* malloc'd, NUL-terminated */
    size_t len;
} hs_http_answer;

/* Splits url into host and port. Returns 0 or HS_EINVAL. */
int hs_http_url_parse(const char *url, char *host, size_t hostlen, int *port);

/* Sends method target (with body when not NULL) to url (or the first of
 * its list that accepts a connection), with
 * "Authorization: Bearer token" when token is not NULL. Returns 0 with *out
 * filled (free out->body), or an HS_E code with a sentence in err. */
int hs_http_request(hs_http_answer *out, const char *url, const char *token, const char *method,
                    const char *target, const char *body, size_t body_len, int timeout_s, char *err,
                    size_t errlen);

/* Whether something accepts TCP connections at host:port (within ms). */
int hs_http_port_open(const char *host, int port, int ms);

#endif
