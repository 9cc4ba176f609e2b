/*
 * PyTorch's allocator configuration (PYTORCH_ALLOC_CONF, PYTORCH_CUDA_ALLOC_CONF) in tidepool's terms.
 * A program moved onto tidepool keeps the settings it already has: each PyTorch key with a tidepool
 * meaning becomes that key, the others are named so that the caller can warn once, and what
 * tidepool's own configuration sets wins. The result is checked as tide_create would check it.
 */
#include "internal.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* PyTorch's key and the tidepool key it becomes; NULL: no tidepool meaning (named as ignored). */
static const struct {
    const char *pytorch;
    const char *tidepool;
} key_map[] = {
    {"expandable_segments", "expandable_segments"},
    {"garbage_collection_threshold", "garbage_collection_threshold"},
    {"max_split_size_mb", "max_split_size_mb"},
    {"per_process_memory_fraction", "limit"},
};

/* Whether the configuration text sets key (tidepool's "key:value,..." syntax). */
static bool sets_key(const char *text, const char *key, size_t klen)
{
    for (const char *p = text; p && *p;) {
        while (*p == ' ' || *p == ',')
            p++;
        const char *colon = strchr(p, ':'), *comma = strchr(p, ',');
        size_t len = colon && (!comma || colon < comma) ? (size_t)(colon - p) : comma ? (size_t)(comma - p)
                                                                                      : strlen(p);
        while (len && p[len - 1] == ' ')
            len--;
        if (len == klen && !strncmp(p, key, klen))
            return true;
        p = comma ? comma + 1 : NULL;
    }
    return false;
}

/* Appends text to a growing string; false when host memory runs out. */
static bool append(char **buf, size_t *len, size_t *cap, const char *text, size_t n)
{
    if (*len + n + 1 > *cap) {
        size_t ncap = (*len + n + 1) * 2;
        char *more = realloc(*buf, ncap);
        if (!more)
            return false;
        *buf = more;
        *cap = ncap;
    }
    memcpy(*buf + *len, text, n);
    *len += n;
    (*buf)[*len] = '\0';
    return true;
}

tide_status tide_config_from_pytorch(const char *pytorch, const char *tidepool, char **out, char **ignored)
{
    if (!out || !ignored)
        return tide__fail(TIDE_EINVAL, "tide_config_from_pytorch: %s is NULL", out ? "ignored" : "out");
    *out = *ignored = NULL;
    char *conf = NULL, *skip = NULL;
    size_t clen = 0, ccap = 0, slen = 0, scap = 0;
    bool ok = append(&conf, &clen, &ccap, "", 0) && append(&skip, &slen, &scap, "", 0);
    /* A value may hold commas inside brackets (roundup_power2_divisions:[256:1,512:2]): an item ends
     * at a comma outside them. */
    for (const char *p = pytorch ? pytorch : ""; ok && *p;) {
        while (*p == ' ' || *p == ',')
            p++;
        if (!*p)
            break;
        const char *end = p;
        for (int depth = 0; *end && (depth || *end != ','); end++)
            depth += *end == '[' ? 1 : *end == ']' ? -1 : 0;
        const char *colon = memchr(p, ':', (size_t)(end - p));
        if (!colon) {
            free(conf);
            free(skip);
            return tide__fail(TIDE_EINVAL, "PyTorch's allocator configuration: \"%.*s\" is not key:value",
                              (int)(end - p), p);
        }
        size_t klen = (size_t)(colon - p);
        while (klen && p[klen - 1] == ' ')
            klen--;
        const char *v = colon + 1;
        size_t vlen = (size_t)(end - v);
        while (vlen && *v == ' ')
            v++, vlen--;
        while (vlen && v[vlen - 1] == ' ')
            vlen--;
        const char *mapped = NULL;
        for (size_t i = 0; i < sizeof key_map / sizeof *key_map; i++)
            if (strlen(key_map[i].pytorch) == klen && !strncmp(p, key_map[i].pytorch, klen))
                mapped = key_map[i].tidepool;
        /* backend:native is PyTorch's own allocator, which tidepool takes the place of: nothing to say. */
        bool native = klen == 7 && !strncmp(p, "backend", 7) && vlen >= 6 && !strncmp(v, "native", 6);
        if (mapped && !sets_key(tidepool, mapped, strlen(mapped))) {
            /* A fraction of 1 written "1" would be a limit of one byte in tidepool's terms. */
            bool whole_fraction = !strcmp(mapped, "limit") && !memchr(v, '.', vlen) && !memchr(v, '%', vlen);
            ok = (clen == 0 || append(&conf, &clen, &ccap, ",", 1)) &&
                 append(&conf, &clen, &ccap, mapped, strlen(mapped)) && append(&conf, &clen, &ccap, ":", 1) &&
                 append(&conf, &clen, &ccap, v, vlen) && (!whole_fraction || append(&conf, &clen, &ccap, ".0", 2));
        } else if (!mapped && !native) {
            ok = (slen == 0 || append(&skip, &slen, &scap, ",", 1)) && append(&skip, &slen, &scap, p, klen);
        }
        p = end;
    }
    if (!ok) {
        free(conf);
        free(skip);
        return tide__fail(TIDE_EHOSTMEM, "tide_config_from_pytorch: no host memory");
    }
    tide_status s = config_check_with(NULL, conf, "PyTorch's allocator configuration");
    if (s != TIDE_OK) {
        free(conf);
        free(skip);
        return s;
    }
    *out = conf;
    *ignored = skip;
    return TIDE_OK;
}
