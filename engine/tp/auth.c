/* auth.c: the ranks' shared key file (reading it strictly, creating it with mode 0600), random
 * nonces, the handshake proofs, and whether a listening address is loopback only. */
#include <errno.h>
#include <fcntl.h>
#include <netdb.h>
#include <netinet/in.h>
#include <stdio.h>
#include <string.h>
#include <sys/random.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <unistd.h>

#include "tp/auth.h"
#include "tp/hmac_sha256.h"
#include "tp/transport.h"

#define KEY_HEX_CHARS (2 * TP_KEY_BYTES)

static const char *make_key_hint = "make one with `glmchat worker --new-key FILE` and give both ranks "
                                   "a copy with --key-file FILE";

static int hex_value(int c)
{
    if (c >= '0' && c <= '9')
        return c - '0';
    if (c >= 'a' && c <= 'f')
        return c - 'a' + 10;
    if (c >= 'A' && c <= 'F')
        return c - 'A' + 10;
    return -1;
}

/* 64 hex digits then at most a line end; anything else is not a key. */
static glm_status parse_key_text(const char *path, const char *text, size_t len, tp_key *key,
                                 glm_error *err)
{
    size_t end = len;
    if (end > 0 && text[end - 1] == '\n')
        end--;
    if (end > 0 && text[end - 1] == '\r')
        end--;
    if (end != KEY_HEX_CHARS)
        return glm_error_set(err, GLM_ERR_FORMAT, "key file %s holds %zu characters, not the %u hex "
                             "digits of a key; %s", path, end, KEY_HEX_CHARS, make_key_hint);
    for (size_t i = 0; i < TP_KEY_BYTES; i++) {
        int hi = hex_value((unsigned char)text[2 * i]), lo = hex_value((unsigned char)text[2 * i + 1]);
        if (hi < 0 || lo < 0)
            return glm_error_set(err, GLM_ERR_FORMAT, "key file %s has a character that is not a hex "
                                 "digit at offset %zu; %s", path, hi < 0 ? 2 * i : 2 * i + 1, make_key_hint);
        key->bytes[i] = (uint8_t)(hi << 4 | lo);
    }
    key->set = 1;
    return GLM_OK;
}

glm_status tp_key_load(const char *path, tp_key *key, glm_error *err)
{
    memset(key, 0, sizeof *key);
    int fd = open(path, O_RDONLY | O_CLOEXEC | O_NOFOLLOW);
    if (fd < 0)
        return glm_error_set(err, GLM_ERR_IO, "cannot open key file %s: %s; %s", path, strerror(errno),
                             make_key_hint);
    struct stat st;
    glm_status status = GLM_OK;
    char text[KEY_HEX_CHARS + 3];
    ssize_t n = 0;
    if (fstat(fd, &st) != 0)
        status = glm_error_set(err, GLM_ERR_IO, "cannot stat key file %s: %s", path, strerror(errno));
    else if (!S_ISREG(st.st_mode))
        status = glm_error_set(err, GLM_ERR_IO, "key file %s is not a regular file; %s", path, make_key_hint);
    else if (st.st_mode & (S_IRWXG | S_IRWXO))
        status = glm_error_set(err, GLM_ERR_IO, "key file %s has mode %04o: its group or others may use "
                               "it, so it is refused (as ssh refuses such a private key); run "
                               "`chmod 600 %s`", path, (unsigned)(st.st_mode & 07777), path);
    else if ((n = read(fd, text, sizeof text)) < 0)
        status = glm_error_set(err, GLM_ERR_IO, "cannot read key file %s: %s", path, strerror(errno));
    close(fd);
    if (status == GLM_OK)
        status = parse_key_text(path, text, (size_t)n, key, err);
    memset(text, 0, sizeof text);
    if (status != GLM_OK)
        memset(key, 0, sizeof *key);
    return status;
}

glm_status tp_random_bytes(uint8_t *out, size_t n, glm_error *err)
{
    size_t done = 0;
    while (done < n) {
        ssize_t got = getrandom(out + done, n - done, 0);
        if (got < 0 && errno == EINTR)
            continue;
        if (got <= 0)
            return glm_error_set(err, GLM_ERR_IO, "cannot read random bytes from the kernel: %s",
                                 strerror(errno));
        done += (size_t)got;
    }
    return GLM_OK;
}

glm_status tp_key_create(const char *path, glm_error *err)
{
    uint8_t bytes[TP_KEY_BYTES];
    glm_status st = tp_random_bytes(bytes, sizeof bytes, err);
    if (st != GLM_OK)
        return st;
    char text[KEY_HEX_CHARS + 2];
    for (size_t i = 0; i < TP_KEY_BYTES; i++)
        snprintf(text + 2 * i, 3, "%02x", bytes[i]);
    text[KEY_HEX_CHARS] = '\n';
    text[KEY_HEX_CHARS + 1] = '\0';
    memset(bytes, 0, sizeof bytes);
    int fd = open(path, O_WRONLY | O_CREAT | O_EXCL | O_CLOEXEC | O_NOFOLLOW, 0600);
    if (fd < 0) {
        memset(text, 0, sizeof text);
        return glm_error_set(err, GLM_ERR_IO, "cannot create key file %s: %s%s", path, strerror(errno),
                             errno == EEXIST ? " (an existing key is never replaced; remove it first "
                                               "or pick another name)" : "");
    }
    /* the umask may have taken bits away, never added them; make the mode exactly 0600 */
    int ok = fchmod(fd, 0600) == 0 && write(fd, text, KEY_HEX_CHARS + 1) == (ssize_t)(KEY_HEX_CHARS + 1);
    int saved = errno;
    ok = close(fd) == 0 && ok;
    memset(text, 0, sizeof text);
    if (!ok) {
        unlink(path);
        return glm_error_set(err, GLM_ERR_IO, "cannot write key file %s: %s", path, strerror(saved));
    }
    return GLM_OK;
}

void tp_auth_proof(const tp_key *key, const char *role, const uint8_t worker_nonce[TP_NONCE_BYTES],
                   const uint8_t head_nonce[TP_NONCE_BYTES], uint8_t out[TP_PROOF_BYTES])
{
    /* the label's NUL ends it, so no role's label is a prefix of another's input */
    static const char label[] = "glmchat two-rank handshake";
    tp_hmac_sha256 h;
    tp_hmac_sha256_init(&h, key->bytes, sizeof key->bytes);
    tp_hmac_sha256_update(&h, label, sizeof label);
    tp_hmac_sha256_update(&h, role, strlen(role) + 1);
    tp_hmac_sha256_update(&h, worker_nonce, TP_NONCE_BYTES);
    tp_hmac_sha256_update(&h, head_nonce, TP_NONCE_BYTES);
    tp_hmac_sha256_final(&h, out);
}

static int sockaddr_is_loopback(const struct sockaddr *sa)
{
    if (sa->sa_family == AF_INET) {
        const struct sockaddr_in *in = (const struct sockaddr_in *)sa;
        return (ntohl(in->sin_addr.s_addr) >> 24) == 127;
    }
    if (sa->sa_family == AF_INET6) {
        const struct in6_addr *a = &((const struct sockaddr_in6 *)sa)->sin6_addr;
        if (IN6_IS_ADDR_LOOPBACK(a))
            return 1;
        return IN6_IS_ADDR_V4MAPPED(a) && a->s6_addr[12] == 127;
    }
    return 0;
}

int tp_address_is_loopback(const char *hostport, glm_error *err)
{
    char host[256], port[8];
    if (tp_parse_hostport(hostport, host, sizeof host, port, sizeof port, err) != GLM_OK)
        return -1;
    struct addrinfo hints = {0}, *res = NULL;
    hints.ai_family = AF_UNSPEC;
    hints.ai_socktype = SOCK_STREAM;
    hints.ai_flags = AI_PASSIVE;
    int rc = getaddrinfo(host, port, &hints, &res);
    if (rc != 0) {
        glm_error_set(err, GLM_ERR_ARG, "cannot resolve '%s': %s", host, gai_strerror(rc));
        return -1;
    }
    int all = 1;
    for (struct addrinfo *a = res; a; a = a->ai_next)
        all = all && sockaddr_is_loopback(a->ai_addr);
    freeaddrinfo(res);
    return all;
}
