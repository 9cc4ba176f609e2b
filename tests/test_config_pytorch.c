/*
 * PyTorch's allocator configuration in tidepool's terms (tide_config_from_pytorch): keys with a
 * tidepool meaning carried over, the rest named once, tidepool's own configuration winning, bad
 * values refused with PyTorch's key named.
 */
#include "harness.h"

static void expect(const char *pytorch, const char *tidepool, const char *want, const char *want_ignored)
{
    char *out = NULL, *ignored = NULL;
    CHECK_OK(tide_config_from_pytorch(pytorch, tidepool, &out, &ignored));
    if (out && strcmp(out, want)) {
        fprintf(stderr, "from \"%s\": got \"%s\", expected \"%s\"\n", pytorch, out, want);
        CHECK(0);
    }
    if (ignored && strcmp(ignored, want_ignored)) {
        fprintf(stderr, "from \"%s\": ignored \"%s\", expected \"%s\"\n", pytorch, ignored, want_ignored);
        CHECK(0);
    }
    tide_string_free(out);
    tide_string_free(ignored);
}

static void test_keys_carried_over(void)
{
    expect("expandable_segments:True", NULL, "expandable_segments:True", "");
    expect("garbage_collection_threshold:0.6,max_split_size_mb:256", NULL,
           "garbage_collection_threshold:0.6,max_split_size_mb:256", "");
    expect("per_process_memory_fraction:0.5", NULL, "limit:0.5", "");
    expect("per_process_memory_fraction:1", NULL, "limit:1.0", ""); /* a fraction, not one byte */
    expect(" expandable_segments : True , ", NULL, "expandable_segments:True", "");
    expect("", NULL, "", "");
    expect(NULL, NULL, "", "");
    expect("backend:native", NULL, "", "");
}

static void test_others_named(void)
{
    expect("roundup_power2_divisions:[256:1,512:2,>:8],expandable_segments:True,"
           "release_lock_on_cudamalloc:True,backend:cudaMallocAsync",
           NULL, "expandable_segments:True", "roundup_power2_divisions,release_lock_on_cudamalloc,backend");
    expect("pinned_use_cuda_host_register:True,pinned_num_register_threads:8", NULL, "",
           "pinned_use_cuda_host_register,pinned_num_register_threads");
}

static void test_tidepool_wins(void)
{
    expect("expandable_segments:True,max_split_size_mb:256", "expandable_segments:False", "max_split_size_mb:256", "");
    expect("per_process_memory_fraction:0.5", "limit:8GiB,debug:1", "", "");
}

/* Bad values are refused in PyTorch's key's words, and nothing is returned. */
static void test_bad_values_refused(void)
{
    char *out = (char *)1, *ignored = (char *)1;
    CHECK_STATUS(tide_config_from_pytorch("garbage_collection_threshold:1.5", NULL, &out, &ignored), TIDE_EINVAL);
    CHECK_MESSAGE("PyTorch's allocator configuration");
    CHECK_MESSAGE("garbage_collection_threshold");
    CHECK(out == NULL && ignored == NULL);
    CHECK_STATUS(tide_config_from_pytorch("expandable_segments", NULL, &out, &ignored), TIDE_EINVAL);
    CHECK_MESSAGE("is not key:value");
    CHECK_STATUS(tide_config_from_pytorch("max_split_size_mb:10", NULL, &out, &ignored), TIDE_EINVAL);
    CHECK_STATUS(tide_config_from_pytorch("", NULL, NULL, &ignored), TIDE_EINVAL);
    CHECK_STATUS(tide_config_from_pytorch("", NULL, &out, NULL), TIDE_EINVAL);
}

/* What comes out is taken by tide_create. */
static void test_result_creates(void)
{
    char *out = NULL, *ignored = NULL;
    CHECK_OK(tide_config_from_pytorch("expandable_segments:True,per_process_memory_fraction:0.25,"
                                      "roundup_power2_divisions:4", NULL, &out, &ignored));
    struct fixture f;
    fixture_open(&f, 8 * GIB, out);
    tide_stats s = stats_of(f.t);
    CHECK(s.limit_bytes == 2 * GIB);
    fixture_close(&f);
    tide_string_free(out);
    tide_string_free(ignored);
}

int main(void)
{
    RUN(test_keys_carried_over);
    RUN(test_others_named);
    RUN(test_tidepool_wins);
    RUN(test_bad_values_refused);
    RUN(test_result_creates);
    return HARNESS_EXIT();
}
