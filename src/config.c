/*
 * The configuration string: "key:value,key:value", as in PYTORCH_CUDA_ALLOC_CONF. Every key is in one
 * table (below) with its kind, range, default and documentation; every value is checked, and nothing
 * is silently ignored. TIDEPOOL_CONF is read here only (config_load).
 */
#include "internal.h"

#include <ctype.h>
#include <stddef.h>
#include <stdio.h>
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

/* ---- numbers ---------------------------------------------------------------------------------------- */
/*
 * Every number in a configuration, and every size tide_parse_size reads, goes through decimal_parse and
 * is computed on exactly from its digits: nothing passes through a double that is not itself the value
 * kept (a fraction). A size is the decimal times its unit, which must come to a whole number of bytes
 * below 2^64; a fraction has at most FRACTION_PLACES digits after the point, so that the double it
 * becomes is told apart from every bound it is checked against.
 */

/* A decimal that can be a whole number of bytes below 2^64 has at most 20 digits before the point and,
 * times a unit of at most 2^40, at most 40 after it (see decimal_times): with room for the unit's digits. */
#define DECIMAL_WHOLE_MAX 20
#define DECIMAL_FRACTION_MAX 40
#define DECIMAL_DIGITS (DECIMAL_WHOLE_MAX + DECIMAL_FRACTION_MAX)
#define FRACTION_PLACES 15

/* value = digits (as a whole number) / 10^places. Leading zeros and zeros that end the fraction are
 * dropped, so zero has no digits; whole and places count the digits on each side of the point, also
 * where there were too many to keep (then digits holds none and too_long is set). */
struct decimal {
    char digits[DECIMAL_DIGITS];
    size_t n;
    size_t whole, places;
    bool too_long;
};

/* [s, s+len) is digits with at most one '.', and at least one digit: no sign, no exponent, no space. */
static bool decimal_parse(const char *s, size_t len, struct decimal *d)
{
    size_t point = len, ndigits = 0;
    for (size_t i = 0; i < len; i++) {
        if (s[i] == '.' && point == len)
            point = i;
        else if (s[i] >= '0' && s[i] <= '9')
            ndigits++;
        else
            return false;
    }
    if (ndigits == 0)
        return false;
    size_t first = 0, last = len; /* the significant digits: [first, last) less the point */
    while (first < len && (s[first] == '0' || s[first] == '.'))
        first++;
    if (point < len)
        while (last > point + 1 && s[last - 1] == '0')
            last--;
    if (last == point + 1)
        last = point; /* "12." and "12.000": no fraction */
    memset(d, 0, sizeof *d);
    if (first >= last)
        return true; /* zero */
    d->whole = first < point ? point - first : 0;
    d->places = last > point ? last - point - 1 : 0;
    if (d->whole > DECIMAL_WHOLE_MAX || d->places > DECIMAL_FRACTION_MAX) {
        d->too_long = true;
        return true;
    }
    for (size_t i = first; i < last; i++)
        if (s[i] != '.')
            d->digits[d->n++] = s[i];
    return true;
}

enum { SIZE_EXACT, SIZE_NOT_WHOLE, SIZE_TOO_LARGE };

/* d times factor (at most 2^40), exactly: SIZE_EXACT and *out, or why not with the exact product in
 * words (up to ~80 characters) in why. */
static int decimal_times(const struct decimal *d, uint64_t factor, uint64_t *out, char *why, size_t whycap)
{
    if (d->whole > DECIMAL_WHOLE_MAX) /* 10^20 or more: past 2^64 whatever the unit */
        return SIZE_TOO_LARGE;
    /* Past 40 digits after the point no unit makes a whole number: the last digit is not 0, so for
     * the product to end its fraction 5^places and 2^places must divide digits x factor, and digits
     * holds at most one of 2 and 5 while factor is 2^a (a <= 40) or 10^b (b <= 12). */
    if (d->too_long)
        return SIZE_NOT_WHOLE;
    /* The product's digits, least significant first: digit x factor + carry stays below 10 x 2^40. */
    unsigned char p[DECIMAL_DIGITS + 16] = {0};
    size_t np = 0;
    uint64_t carry = 0;
    for (size_t i = d->n; i-- > 0;) {
        uint64_t x = (uint64_t)(d->digits[i] - '0') * factor + carry;
        p[np++] = (unsigned char)(x % 10);
        carry = x / 10;
    }
    for (; carry; carry /= 10)
        p[np++] = (unsigned char)(carry % 10);
    while (np > d->places && np && p[np - 1] == 0)
        np--;
    bool whole = true;
    for (size_t i = 0; i < d->places && i < np; i++)
        whole = whole && p[i] == 0;
    uint64_t v = 0;
    bool fits = true;
    for (size_t i = np; i-- > d->places;) {
        if (v > (UINT64_MAX - p[i]) / 10)
            fits = false;
        v = fits ? v * 10 + p[i] : v;
    }
    if (!fits)
        return SIZE_TOO_LARGE;
    if (!whole) {
        if (why && whycap) { /* "1024.0001024" */
            size_t k = 0;
            char text[DECIMAL_DIGITS + 20];
            if (np <= d->places)
                text[k++] = '0';
            for (size_t i = np; i-- > d->places;)
                text[k++] = (char)('0' + p[i]);
            text[k++] = '.';
            size_t lowest = 0;
            while (p[lowest] == 0)
                lowest++;
            for (size_t i = d->places; i-- > lowest;)
                text[k++] = (char)('0' + (i < np ? p[i] : 0));
            text[k] = '\0';
            snprintf(why, whycap, "it is %s bytes, not a whole number", text);
        }
        return SIZE_NOT_WHOLE;
    }
    *out = v;
    return SIZE_EXACT;
}

static const struct {
    const char *name;
    uint64_t factor;
} units[] = {
    {"", 1},
    {"B", 1},
    {"K", 1ull << 10},
    {"KiB", 1ull << 10},
    {"KB", 1000ull},
    {"M", 1ull << 20},
    {"MiB", 1ull << 20},
    {"MB", 1000000ull},
    {"G", 1ull << 30},
    {"GiB", 1ull << 30},
    {"GB", 1000000000ull},
    {"T", 1ull << 40},
    {"TiB", 1ull << 40},
    {"TB", 1000000000000ull},
};

bool parse_size(const char *s, size_t len, uint64_t *out, char *why, size_t whycap)
{
    char ignored[8];
    if (!why || !whycap) {
        why = ignored;
        whycap = sizeof ignored;
    }
    size_t digits = 0;
    while (digits < len && ((s[digits] >= '0' && s[digits] <= '9') || s[digits] == '.'))
        digits++;
    struct decimal d;
    if (!decimal_parse(s, digits, &d)) {
        snprintf(why, whycap, "expected a whole number of bytes with an optional unit, such as 4096, "
                              "512MB, 1.5MiB or 80GiB");
        return false;
    }
    const char *unit = s + digits;
    size_t ulen = len - digits;
    while (ulen && *unit == ' ') {
        unit++;
        ulen--;
    }
    for (size_t i = 0; i < sizeof units / sizeof units[0]; i++) {
        if (!equals(unit, ulen, units[i].name))
            continue;
        int r = decimal_times(&d, units[i].factor, out, why, whycap);
        if (r == SIZE_TOO_LARGE)
            snprintf(why, whycap, "it is more than 2^64 - 1 (18446744073709551615) bytes");
        else if (r == SIZE_NOT_WHOLE && d.too_long)
            snprintf(why, whycap, "it has more than %d digits after the point: no unit makes that a "
                                  "whole number of bytes", DECIMAL_FRACTION_MAX);
        return r == SIZE_EXACT;
    }
    snprintf(why, whycap, "'%.*s' is not a unit (B; K or KiB, M or MiB, G or GiB, T or TiB: powers of "
                          "1024; KB, MB, GB, TB: powers of 1000)", ulen > 16 ? 16 : (int)ulen, unit);
    return false;
}

/* Whether d compares to 10^-shift: below (-1), equal (0) or above (1). */
static int decimal_cmp_unit(const struct decimal *d, size_t shift)
{
    if (d->n == 0)
        return -1;
    /* digits / 10^(places+shift) against 1: digits against 10^(places+shift) */
    size_t scale = d->places + shift;
    if (d->n != scale + 1)
        return d->n > scale + 1 ? 1 : -1;
    if (d->digits[0] != '1')
        return 1;
    for (size_t i = 1; i < d->n; i++)
        if (d->digits[i] != '0')
            return 1;
    return 0;
}

/* A fraction 0 < F < 1 (or <= 1 when one_allowed), written as a decimal, or as a percentage when
 * shift is 2. The bounds are checked on the digits; the double kept is the decimal's nearest, which
 * with at most FRACTION_PLACES places lies on the same side of each bound. */
static bool parse_fraction(const char *s, size_t len, size_t shift, bool one_allowed, double *out,
                           char *why, size_t whycap)
{
    struct decimal d;
    if (!decimal_parse(s, len, &d)) {
        snprintf(why, whycap, "it is not a decimal (digits with at most one '.', no sign, no exponent)");
        return false;
    }
    int vs_one = d.too_long ? 0 : decimal_cmp_unit(&d, shift);
    const char *one = shift ? "100%" : "1";
    if (d.whole > shift + 1 || vs_one > 0) {
        snprintf(why, whycap, "it is more than %s", one);
        return false;
    }
    if (!d.too_long && d.n == 0) {
        snprintf(why, whycap, "it is 0");
        return false;
    }
    if (!d.too_long && vs_one == 0 && !one_allowed) {
        snprintf(why, whycap, "it is %s", one);
        return false;
    }
    if (d.too_long || d.places + shift > FRACTION_PLACES) {
        snprintf(why, whycap, "it has more than %zu digits after the point, more than a double keeps",
                 FRACTION_PLACES - shift);
        return false;
    }
    char text[DECIMAL_DIGITS + 8];
    snprintf(text, sizeof text, "%.*se-%zu", (int)d.n, d.digits, d.places + shift);
    *out = strtod(text, NULL);
    return true;
}

/* A whole number written in digits alone. */
static bool parse_whole(const char *s, size_t len, uint64_t *out)
{
    struct decimal d;
    for (size_t i = 0; i < len; i++)
        if (s[i] < '0' || s[i] > '9')
            return false;
    return decimal_parse(s, len, &d) && decimal_times(&d, 1, out, NULL, 0) == SIZE_EXACT;
}

/* ---- the keys ------------------------------------------------------------------------------------- */

/* How a key's value is read, and where it goes. */
enum key_kind {
    KEY_BOOL,         /* True/False (any case), 1/0, into a bool */
    KEY_LEVEL,        /* a whole number in [lo, hi], into an int */
    KEY_FRACTION,     /* a decimal 0 < F < 1, into a double */
    KEY_MIB,          /* a whole number of MiB in [lo, hi], into a size_t of bytes */
    KEY_LIMIT,        /* bytes, or a fraction of the device: limit_bytes, limit_fraction, limit_set */
};

struct config_key {
    tide_config_key doc;              /* what tide_config_keys tells users */
    enum key_kind kind;
    size_t field;                     /* offsetof the value in struct tide_config */
    uint64_t lo, hi;                  /* the range, for KEY_LEVEL and KEY_MIB (in MiB) */
    union {                           /* the default, in the field's own type (KEY_LIMIT has none) */
        bool flag;                    /* KEY_BOOL */
        int level;                    /* KEY_LEVEL */
        double fraction;              /* KEY_FRACTION */
        size_t bytes;                 /* KEY_MIB: in bytes; SIZE_MAX for none */
    } dflt;
    const char *expected;             /* the message's "expected ..." */
};

#define FIELD(f) offsetof(struct tide_config, f)
#define BOOL_KEY(name, f, dflt, doc)                                                                     { {name, "bool", (dflt) ? "True" : "False", doc}, KEY_BOOL, FIELD(f), 0, 1, {.flag = (dflt)}, "True or False" }

/* Every key, once. The manual (tidepool.h, CONFIGURATION) and README's table say the same; the test
 * config_keys_documented checks README's against tide_config_keys. */
static const struct config_key keys[] = {
    {{"limit", "size or fraction", "the device's memory",
      "reserved memory never exceeds it: bytes (8GiB, 512MB) or a fraction of the device (0.9, 90%)"},
     KEY_LIMIT, FIELD(limit_bytes), 0, 0, {.bytes = 0},
     "bytes (\"8GiB\", \"512MB\", \"4096\") or a fraction of the device (\"0.9\", \"90%\")"},
    {{"garbage_collection_threshold", "fraction", "off",
      "0 < F < 1: above F x limit, give the oldest idle segments back before reserving"},
     KEY_FRACTION, FIELD(gc_threshold), 0, 1, {.fraction = 0}, "a fraction of the limit, 0 < F < 1"},
    {{"max_split_size_mb", "MiB", "unlimited",
      "segments reserved for requests of N MiB or more (N > 20) serve smaller requests only where a "
      "segment of their own would pass the most ever reserved; no effect with expandable segments"},
     KEY_MIB, FIELD(max_split_size), 21, UINT64_MAX >> 21, {.bytes = SIZE_MAX},
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
     KEY_LEVEL, FIELD(debug), DEBUG_OFF, DEBUG_EVERY_CALL, {.level = DEBUG_OFF}, "0, 1 or 2"},
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
        switch (keys[i].kind) {
        case KEY_BOOL: store(c, field, &keys[i].dflt.flag, sizeof(bool)); break;
        case KEY_LEVEL: store(c, field, &keys[i].dflt.level, sizeof(int)); break;
        case KEY_FRACTION: store(c, field, &keys[i].dflt.fraction, sizeof(double)); break;
        case KEY_MIB: store(c, field, &keys[i].dflt.bytes, sizeof(size_t)); break;
        case KEY_LIMIT: break; /* unset: the device's memory, decided at tide_create */
        }
    }
}

/* why, if not NULL, says what is wrong with the value beyond its not being what is expected. */
static tide_status bad_value(const char *origin, const struct config_key *key, const char *v, size_t vlen,
                             const char *why)
{
    return tide__fail(TIDE_EINVAL, "%s: bad value '%.*s' for %s: %s%sexpected %s", origin, (int)vlen, v,
                      key->doc.name, why ? why : "", why ? "; " : "", key->expected);
}

static bool is_decimal(const char *v, size_t vlen)
{
    for (size_t i = 0; i < vlen; i++)
        if ((v[i] < '0' || v[i] > '9') && v[i] != '.')
            return false;
    return vlen > 0;
}

static tide_status apply_limit(struct tide_config *c, const char *origin, const struct config_key *key,
                               const char *v, size_t vlen)
{
    char why[160];
    double f;
    uint64_t bytes;
    if (vlen && v[vlen - 1] == '%') {
        if (!parse_fraction(v, vlen - 1, 2, true, &f, why, sizeof why))
            return bad_value(origin, key, v, vlen, why);
        c->limit_fraction = f;
    } else if (memchr(v, '.', vlen) && is_decimal(v, vlen)) { /* no unit: a fraction of the device */
        if (!parse_fraction(v, vlen, 0, true, &f, why, sizeof why))
            return tide__fail(TIDE_EINVAL, "%s: bad value '%.*s' for limit: %s; expected a fraction of the "
                              "device in (0, 1], or bytes with a unit (\"1.5GiB\")", origin, (int)vlen, v, why);
        c->limit_fraction = f;
    } else if (parse_size(v, vlen, &bytes, why, sizeof why)) {
        if (bytes == 0 || bytes > SIZE_MAX)
            return bad_value(origin, key, v, vlen, bytes ? "it is more than SIZE_MAX bytes" : "it is 0");
        c->limit_fraction = 0;
        c->limit_bytes = (size_t)bytes;
    } else {
        return bad_value(origin, key, v, vlen, why);
    }
    c->limit_set = true;
    return TIDE_OK;
}

static tide_status apply(struct tide_config *c, const char *origin, const struct config_key *key,
                         const char *v, size_t vlen)
{
    char why[160];
    double f;
    uint64_t n;
    bool b;
    int level;
    size_t bytes;
    switch (key->kind) {
    case KEY_BOOL:
        if (!parse_bool(v, vlen, &b))
            return bad_value(origin, key, v, vlen, NULL);
        store(c, key->field, &b, sizeof b);
        return TIDE_OK;
    case KEY_LEVEL:
        if (!parse_whole(v, vlen, &n) || n < key->lo || n > key->hi)
            return bad_value(origin, key, v, vlen, NULL);
        level = (int)n;
        store(c, key->field, &level, sizeof level);
        return TIDE_OK;
    case KEY_FRACTION:
        if (!parse_fraction(v, vlen, 0, false, &f, why, sizeof why))
            return bad_value(origin, key, v, vlen, why);
        store(c, key->field, &f, sizeof f);
        return TIDE_OK;
    case KEY_MIB:
        if (!parse_whole(v, vlen, &n) || n < key->lo || n > key->hi || n > SIZE_MAX / MiB)
            return bad_value(origin, key, v, vlen, NULL);
        bytes = (size_t)n * MiB;
        store(c, key->field, &bytes, sizeof bytes);
        return TIDE_OK;
    case KEY_LIMIT:
        return apply_limit(c, origin, key, v, vlen);
    }
    return bad_value(origin, key, v, vlen, NULL);
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
    char why[160];
    if (!text || !out)
        return tide__fail(TIDE_EINVAL, "tide_parse_size: %s is NULL", text ? "out" : "the text");
    if (!parse_size(text, strlen(text), &v, why, sizeof why))
        return tide__fail(TIDE_EINVAL, "'%s' is not a size: %s", text, why);
    *out = v;
    return TIDE_OK;
}

tide_status config_accept(const struct tide_config *c, const tide_backend *be, const char *origin)
{
    /* First what no backend changes, so that tide_config_check, which has none, refuses exactly these. */
    if (c->peer_access && !c->expandable_segments)
        return tide__fail(TIDE_EINVAL, "%s: peer_access:True needs expandable_segments:True (peer access to "
                          "memory from cuMemAlloc is the CUDA runtime's cudaDeviceEnablePeerAccess)", origin);
    if (!be)
        return TIDE_OK;
    const char *name = be->name ? be->name : "(unnamed)"; /* a backend need not name itself */
    /* Fields were only ever added at the end of the table: what an older caller's lacks is absent. */
    bool has_fill = be->struct_size > offsetof(tide_backend, fill) && be->fill;
    bool has_verify = be->struct_size > offsetof(tide_backend, verify) && be->verify;
    bool has_vm = be->struct_size > offsetof(tide_backend, unmap) && be->va_reserve && be->va_release &&
                  be->map && be->unmap;
    if ((c->scrub || c->guard) && !has_fill)
        return tide__fail(TIDE_EUNSUPPORTED, "%s: %s needs a backend with a fill function, and the %s "
                          "backend has none", origin, c->scrub ? "scrub:True" : "guard:True", name);
    if (c->guard && !has_verify)
        return tide__fail(TIDE_EUNSUPPORTED, "%s: guard:True needs a backend with a verify function, and "
                          "the %s backend has none", origin, name);
    if (c->expandable_segments && !has_vm)
        return tide__fail(TIDE_EUNSUPPORTED, "%s: expandable_segments:True needs a backend with virtual "
                          "memory (va_reserve, va_release, map, unmap), and the %s backend has none",
                          origin, name);
    if (c->expandable_segments && (be->page_size == 0 || be->page_size % TIDE_SEGMENT_GRANULE))
        return tide__fail(TIDE_EUNSUPPORTED, "%s: expandable_segments:True: the %s backend's page size "
                          "(%zu bytes) is not a multiple of 2 MiB", origin, name, be->page_size);
    return TIDE_OK;
}

tide_status config_check_with(const tide_backend *be, const char *config, const char *origin)
{
    struct tide_config c;
    config_defaults(&c);
    origin = origin ? origin : "config";
    tide_status s = config_parse(&c, config, origin);
    return s == TIDE_OK ? config_accept(&c, be, origin) : s;
}

tide_status tide_config_check(const char *config, const char *origin)
{
    return config_check_with(NULL, config, origin);
}
