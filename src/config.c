/*
 * The configuration string: "key:value,key:value", as in PYTORCH_CUDA_ALLOC_CONF. Every key is in one
 * table (below) with its kind, range, default and documentation; every value is checked, and nothing
 * is silently ignored. TIDEPOOL_CONF is read here only (config_load).
 */
#include "internal.h"

#include <ctype.h>
#include <stddef.h>
#include <errno.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>

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
    /* Decimal only: strtod would also read hexadecimal ("0x1p-1"), which no one means here. */
    if (strspn(tmp, "0123456789.eE+-") != len)
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

/* ---- the keys ------------------------------------------------------------------------------------- */

/* How a key's value is read, and where it goes. */
enum key_kind {
    KEY_BOOL,         /* True/False (any case), 1/0, into a bool */
    KEY_LEVEL,        /* a whole number in [lo, hi], into an int */
    KEY_FRACTION,     /* a decimal in (lo, hi), into a double */
    KEY_MIB,          /* a whole number of MiB in [lo, hi], into a size_t of bytes */
    KEY_LIMIT,        /* bytes, or a fraction of the device: limit_bytes, limit_fraction, limit_set */
};

struct config_key {
    tide_config_key doc;              /* what tide_config_keys tells users */
    enum key_kind kind;
    size_t field;                     /* offsetof the value in struct tide_config */
    double lo, hi;                    /* the range, for KEY_LEVEL, KEY_FRACTION, KEY_MIB */
    double default_value;             /* for KEY_BOOL (0 or 1), KEY_LEVEL, KEY_FRACTION, KEY_MIB (in
                                         bytes; SIZE_MAX for none) */
    const char *expected;             /* the message's "expected ..." */
};

#define FIELD(f) offsetof(struct tide_config, f)
#define BOOL_KEY(name, f, dflt, doc)                                                                     { {name, "bool", (dflt) ? "True" : "False", doc}, KEY_BOOL, FIELD(f), 0, 1, dflt, "True or False" }

/* Every key, once. The manual (tidepool.h, CONFIGURATION) and README's table say the same; the test
 * config_keys_documented checks README's against tide_config_keys. */
static const struct config_key keys[] = {
    {{"limit", "size or fraction", "the device's memory",
      "reserved memory never exceeds it: bytes (8GiB, 512MB) or a fraction of the device (0.9, 90%)"},
     KEY_LIMIT, FIELD(limit_bytes), 0, 0, 0,
     "bytes (\"8GiB\", \"512MB\", \"4096\") or a fraction of the device (\"0.9\", \"90%\")"},
    {{"garbage_collection_threshold", "fraction", "off",
      "0 < F < 1: above F x limit, give the oldest idle segments back before reserving"},
     KEY_FRACTION, FIELD(gc_threshold), 0, 1, 0, "a fraction of the limit, 0 < F < 1"},
    {{"max_split_size_mb", "MiB", "unlimited",
      "segments reserved for requests of N MiB or more (N > 20) serve smaller requests only where a "
      "segment of their own would pass the most ever reserved; no effect with expandable segments"},
     KEY_MIB, FIELD(max_split_size), 21, (double)(UINT64_MAX >> 21), (double)SIZE_MAX,
     "a whole number of MiB above 20"},
    BOOL_KEY("trim_on_growth", trim_on_growth, 1,
             "before reserving past the most ever reserved, give idle segments back"),
    BOOL_KEY("expandable_segments", expandable_segments, 0,
             "segments that grow and shrink by 2 MiB pages (CUDA virtual memory)"),
    BOOL_KEY("peer_access", peer_access, 0, "with expandable segments: map every page for each peer GPU too"),
    BOOL_KEY("scrub", scrub, 0, "zero every block on its stream before it is handed out again"),
    BOOL_KEY("guard", guard, 0,
             "canaries around every block, checked on the device at free (TIDE_ECORRUPT saying where)"),
    BOOL_KEY("leak_report", leak_report, 0, "tide_destroy prints what is still allocated, by tag and call site"),
    {{"debug", "0, 1 or 2", "0",
      "1: validate every invariant after each call that reserves or releases; 2: after every call"},
     KEY_LEVEL, FIELD(debug), 0, 2, 0, "0, 1 or 2"},
};
#define KEY_COUNT (sizeof keys / sizeof keys[0])

const tide_config_key *tide_config_key_at(size_t index)
{
    return index < KEY_COUNT ? &keys[index].doc : NULL;
}

/* Values reach their fields by offset through memcpy, which is defined for any field type. */
static void store(struct tide_config *c, size_t field, const void *value, size_t size)
{
    memcpy((char *)c + field, value, size);
}

void config_defaults(struct tide_config *c)
{
    memset(c, 0, sizeof *c);
    for (size_t i = 0; i < KEY_COUNT; i++) {
        size_t field = keys[i].field;
        double d = keys[i].default_value;
        switch (keys[i].kind) { /* each kind converts its default only: a MiB default is past an int */
        case KEY_BOOL: {
            bool b = d != 0;
            store(c, field, &b, sizeof b);
            break;
        }
        case KEY_LEVEL: {
            int level = (int)d;
            store(c, field, &level, sizeof level);
            break;
        }
        case KEY_FRACTION: store(c, field, &d, sizeof d); break;
        case KEY_MIB: {
            size_t mib = d >= (double)SIZE_MAX ? SIZE_MAX : (size_t)d;
            store(c, field, &mib, sizeof mib);
            break;
        }
        case KEY_LIMIT: break; /* unset: the device's memory, decided at tide_create */
        }
    }
}

static tide_status bad_value(const char *origin, const struct config_key *key, const char *v, size_t vlen)
{
    return tide__fail(TIDE_EINVAL, "%s: bad value '%.*s' for %s: expected %s", origin, (int)vlen, v,
                      key->doc.name, key->expected);
}

static tide_status apply_limit(struct tide_config *c, const char *origin, const struct config_key *key,
                               const char *v, size_t vlen)
{
    double f;
    uint64_t bytes;
    if (vlen && v[vlen - 1] == '%' && parse_double(v, vlen - 1, &f) && f > 0 && f <= 100) {
        c->limit_fraction = f / 100.0;
    } else if (memchr(v, '.', vlen) && parse_double(v, vlen, &f)) {
        if (!(f > 0 && f <= 1))
            return tide__fail(TIDE_EINVAL, "%s: bad value '%.*s' for limit: expected a fraction of the "
                              "device in (0, 1]", origin, (int)vlen, v);
        c->limit_fraction = f;
    } else if (parse_size(v, vlen, &bytes) && bytes > 0 && bytes <= SIZE_MAX) {
        c->limit_fraction = 0;
        c->limit_bytes = (size_t)bytes;
    } else {
        return bad_value(origin, key, v, vlen);
    }
    c->limit_set = true;
    return TIDE_OK;
}

static tide_status apply(struct tide_config *c, const char *origin, const struct config_key *key,
                         const char *v, size_t vlen)
{
    double f;
    uint64_t n;
    bool b;
    int level;
    size_t bytes;
    switch (key->kind) {
    case KEY_BOOL:
        if (!parse_bool(v, vlen, &b))
            return bad_value(origin, key, v, vlen);
        store(c, key->field, &b, sizeof b);
        return TIDE_OK;
    case KEY_LEVEL:
        if (!parse_uint(v, vlen, &n) || (double)n < key->lo || (double)n > key->hi)
            return bad_value(origin, key, v, vlen);
        level = (int)n;
        store(c, key->field, &level, sizeof level);
        return TIDE_OK;
    case KEY_FRACTION:
        if (!parse_double(v, vlen, &f) || !(f > key->lo && f < key->hi))
            return bad_value(origin, key, v, vlen);
        store(c, key->field, &f, sizeof f);
        return TIDE_OK;
    case KEY_MIB:
        if (!parse_uint(v, vlen, &n) || (double)n < key->lo || (double)n > key->hi || n > SIZE_MAX / MiB)
            return bad_value(origin, key, v, vlen);
        bytes = (size_t)n * MiB;
        store(c, key->field, &bytes, sizeof bytes);
        return TIDE_OK;
    case KEY_LIMIT:
        return apply_limit(c, origin, key, v, vlen);
    }
    return bad_value(origin, key, v, vlen);
}

static const struct config_key *find_key(const char *k, size_t klen)
{
    for (size_t i = 0; i < KEY_COUNT; i++)
        if (equals(k, klen, keys[i].doc.name))
            return &keys[i];
    return NULL;
}

static tide_status unknown_key(const char *origin, const char *k, size_t klen)
{
    char known[512];
    size_t n = 0;
    for (size_t i = 0; i < KEY_COUNT && n < sizeof known; i++)
        n += (size_t)snprintf(known + n, sizeof known - n, "%s%s", i ? ", " : "", keys[i].doc.name);
    return tide__fail(TIDE_EINVAL, "%s: unknown key '%.*s' (known keys: %s)", origin, (int)klen, k, known);
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
        const struct config_key *key = find_key(k, klen);
        if (!key)
            return unknown_key(origin, k, klen);
        tide_status s = apply(&next, origin, key, v, vlen);
        if (s != TIDE_OK)
            return s;
        if (!end)
            break;
        p = end + 1;
    }
    *c = next;
    return TIDE_OK;
}

tide_status config_load(struct tide_config *c, const char *text, const char *origin)
{
    config_defaults(c);
    tide_status s = config_parse(c, getenv("TIDEPOOL_CONF"), "TIDEPOOL_CONF");
    return s == TIDE_OK ? config_parse(c, text, origin) : s;
}

tide_status tide_parse_size(const char *text, uint64_t *out)
{
    uint64_t v;
    if (!text || !out)
        return tide__fail(TIDE_EINVAL, "tide_parse_size: %s is NULL", text ? "out" : "the text");
    if (!parse_size(text, strlen(text), &v))
        return tide__fail(TIDE_EINVAL, "'%s' is not a size: expected a whole number of bytes with an "
                          "optional unit, such as 4096, 512MB, 1.5MiB or 80GiB", text);
    *out = v;
    return TIDE_OK;
}

tide_status tide_config_check(const char *config, const char *origin)
{
    struct tide_config c;
    config_defaults(&c);
    return config_parse(&c, config, origin ? origin : "config");
}
