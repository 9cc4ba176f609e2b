/*
 * The configuration string: "key:value,key:value", as in PYTORCH_CUDA_ALLOC_CONF. Every key is known
 * and every value checked; nothing is silently ignored.
 */
#include "internal.h"

#include <ctype.h>
#include <errno.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>

#define KEY_LIST                                                                                   \
    "limit, garbage_collection_threshold, max_split_size_mb, trim_on_growth, debug, expandable_segments, " \
    "scrub, guard, leak_report, peer_access"

void config_defaults(struct tide_config *c)
{
    memset(c, 0, sizeof *c);
    c->max_split_size = SIZE_MAX;
    c->trim_on_growth = true;
}

static bool equals(const char *s, size_t len, const char *word)
{
    return strlen(word) == len && strncmp(s, word, len) == 0;
}

static bool equals_nocase(const char *s, size_t len, const char *word)
{
    if (strlen(word) != len)
        return false;
    for (size_t i = 0; i < len; i++)
        if (tolower((unsigned char)s[i]) != tolower((unsigned char)word[i]))
            return false;
    return true;
}

/* A decimal number filling the whole of [s, s+len). */
static bool parse_double(const char *s, size_t len, double *out)
{
    char tmp[64];
    if (len == 0 || len >= sizeof tmp)
        return false;
    memcpy(tmp, s, len);
    tmp[len] = '\0';
    if (!isdigit((unsigned char)tmp[0]) && tmp[0] != '.')
        return false;
    char *end;
    errno = 0;
    double v = strtod(tmp, &end);
    if (errno || *end || !isfinite(v))
        return false;
    *out = v;
    return true;
}

static bool parse_uint(const char *s, size_t len, uint64_t *out)
{
    if (len == 0)
        return false;
    uint64_t v = 0;
    for (size_t i = 0; i < len; i++) {
        if (!isdigit((unsigned char)s[i]))
            return false;
        unsigned d = (unsigned)(s[i] - '0');
        if (v > (UINT64_MAX - d) / 10)
            return false;
        v = v * 10 + d;
    }
    *out = v;
    return true;
}

bool parse_size(const char *s, size_t len, uint64_t *out)
{
    size_t digits = 0;
    while (digits < len && (isdigit((unsigned char)s[digits]) || s[digits] == '.'))
        digits++;
    double number;
    if (!parse_double(s, digits, &number))
        return false;
    const char *unit = s + digits;
    size_t ulen = len - digits;
    while (ulen && *unit == ' ') {
        unit++;
        ulen--;
    }
    static const struct {
        const char *name;
        double factor;
    } units[] = {
        {"", 1},          {"B", 1},           {"K", 1024.0},        {"KB", 1e3},
        {"KiB", 1024.0},  {"M", 1048576.0},   {"MB", 1e6},          {"MiB", 1048576.0},
        {"G", 1073741824.0}, {"GB", 1e9},     {"GiB", 1073741824.0}, {"T", 1099511627776.0},
        {"TB", 1e12},     {"TiB", 1099511627776.0},
    };
    for (size_t i = 0; i < sizeof units / sizeof units[0]; i++) {
        if (!equals(unit, ulen, units[i].name))
            continue;
        double bytes = number * units[i].factor;
        if (bytes < 0 || bytes > 1.8e19 || bytes != floor(bytes))
            return false;
        *out = (uint64_t)bytes;
        return true;
    }
    return false;
}

static bool parse_bool(const char *s, size_t len, bool *out)
{
    if (equals_nocase(s, len, "true") || equals(s, len, "1")) {
        *out = true;
        return true;
    }
    if (equals_nocase(s, len, "false") || equals(s, len, "0")) {
        *out = false;
        return true;
    }
    return false;
}

static void trim(const char **s, size_t *len)
{
    while (*len && isspace((unsigned char)**s)) {
        (*s)++;
        (*len)--;
    }
    while (*len && isspace((unsigned char)(*s)[*len - 1]))
        (*len)--;
}

static tide_status bad_value(const char *origin, const char *key, size_t klen, const char *v,
                             size_t vlen, const char *expected)
{
    return tide__fail(TIDE_EINVAL, "%s: bad value '%.*s' for %.*s: expected %s", origin, (int)vlen, v,
                      (int)klen, key, expected);
}

static tide_status apply(struct tide_config *c, const char *origin, const char *k, size_t klen,
                         const char *v, size_t vlen)
{
    if (equals(k, klen, "limit")) {
        double f;
        uint64_t bytes;
        if (vlen && v[vlen - 1] == '%' && parse_double(v, vlen - 1, &f) && f > 0 && f <= 100) {
            c->limit_fraction = f / 100.0;
        } else if (memchr(v, '.', vlen) && parse_double(v, vlen, &f)) {
            if (!(f > 0 && f <= 1))
                return bad_value(origin, k, klen, v, vlen, "a fraction of the device in (0, 1]");
            c->limit_fraction = f;
        } else if (parse_size(v, vlen, &bytes) && bytes > 0) {
            c->limit_fraction = 0;
            c->limit_bytes = (size_t)bytes;
        } else {
            return bad_value(origin, k, klen, v, vlen,
                             "bytes (\"8GiB\", \"512MB\", \"4096\") or a fraction of the device "
                             "(\"0.9\", \"90%\")");
        }
        c->limit_set = true;
    } else if (equals(k, klen, "garbage_collection_threshold")) {
        double f;
        if (!parse_double(v, vlen, &f) || !(f > 0 && f < 1))
            return bad_value(origin, k, klen, v, vlen, "a fraction of the limit, 0 < F < 1");
        c->gc_threshold = f;
    } else if (equals(k, klen, "max_split_size_mb")) {
        uint64_t mb;
        if (!parse_uint(v, vlen, &mb) || mb <= 20 || mb > (UINT64_MAX >> 21))
            return bad_value(origin, k, klen, v, vlen, "a whole number of MiB above 20");
        c->max_split_size = (size_t)mb * MiB;
    } else if (equals(k, klen, "trim_on_growth")) {
        if (!parse_bool(v, vlen, &c->trim_on_growth))
            return bad_value(origin, k, klen, v, vlen, "True or False");
    } else if (equals(k, klen, "peer_access")) {
        if (!parse_bool(v, vlen, &c->peer_access))
            return bad_value(origin, k, klen, v, vlen, "True or False");
    } else if (equals(k, klen, "leak_report")) {
        if (!parse_bool(v, vlen, &c->leak_report))
            return bad_value(origin, k, klen, v, vlen, "True or False");
    } else if (equals(k, klen, "scrub")) {
        if (!parse_bool(v, vlen, &c->scrub))
            return bad_value(origin, k, klen, v, vlen, "True or False");
    } else if (equals(k, klen, "guard")) {
        if (!parse_bool(v, vlen, &c->guard))
            return bad_value(origin, k, klen, v, vlen, "True or False");
    } else if (equals(k, klen, "debug")) {
        uint64_t level;
        if (!parse_uint(v, vlen, &level) || level > 2)
            return bad_value(origin, k, klen, v, vlen, "0, 1 or 2");
        c->debug = (int)level;
    } else if (equals(k, klen, "expandable_segments")) {
        if (!parse_bool(v, vlen, &c->expandable_segments))
            return bad_value(origin, k, klen, v, vlen, "True or False");
    } else {
        return tide__fail(TIDE_EINVAL, "%s: unknown key '%.*s' (known keys: " KEY_LIST ")", origin,
                          (int)klen, k);
    }
    return TIDE_OK;
}

tide_status config_parse(struct tide_config *c, const char *text, const char *origin)
{
    if (!text)
        return TIDE_OK;
    struct tide_config next = *c;
    const char *p = text;
    for (;;) {
        const char *end = strchr(p, ',');
        size_t len = end ? (size_t)(end - p) : strlen(p);
        const char *item = p;
        trim(&item, &len);
        if (len == 0) {
            if (!end && p == text)
                break; /* the empty string: nothing to set */
            return tide__fail(TIDE_EINVAL, "%s: empty entry in \"%s\" (entries are key:value, "
                              "separated by commas)", origin, text);
        }
        const char *colon = memchr(item, ':', len);
        if (!colon)
            return tide__fail(TIDE_EINVAL, "%s: '%.*s' has no ':' (entries are key:value)", origin,
                              (int)len, item);
        const char *k = item;
        size_t klen = (size_t)(colon - item);
        const char *v = colon + 1;
        size_t vlen = len - klen - 1;
        trim(&k, &klen);
        trim(&v, &vlen);
        if (klen == 0 || vlen == 0)
            return tide__fail(TIDE_EINVAL, "%s: '%.*s' needs both a key and a value", origin, (int)len,
                              item);
        tide_status s = apply(&next, origin, k, klen, v, vlen);
        if (s != TIDE_OK)
            return s;
        if (!end)
            break;
        p = end + 1;
    }
    *c = next;
    return TIDE_OK;
}
