/* vllm.cpp C ABI: embed the engine in any language that can call C.
 *
 * One engine serves many requests at once (continuous batching on an engine thread).
 * Submit prompts as token ids with sampling parameters as a JSON object (vLLM / OpenAI field
 * names: temperature, top_p, top_k, min_p, seed, max_tokens, stop_token_ids, ignore_eos,
 * ...), then poll each request for its new tokens until it reports finished. Every function
 * is thread-safe. No C++ exception crosses this boundary; a failing call returns a status
 * and vllm_last_error() says why (thread-local, valid until the next call on that thread).
 */
#ifndef VLLM_H_
#define VLLM_H_

#include <stddef.h>
#include <stdint.h>

#ifdef __cplusplus
extern "C" {
#endif

typedef struct vllm_engine vllm_engine;

typedef enum vllm_status {
  VLLM_OK = 0,
  VLLM_INVALID_ARGUMENT = 1, /* bad request, parameters or options */
  VLLM_NOT_FOUND = 2,        /* unknown model folder or request id */
  VLLM_TIMEOUT = 3,          /* vllm_poll: nothing new within the timeout */
  VLLM_ERROR = 4,            /* anything else (I/O, unsupported model, internal) */
} vllm_status;

typedef struct vllm_engine_options {
  int32_t max_num_seqs;            /* default 256 */
  int64_t max_num_batched_tokens;  /* default 8192 */
  int64_t max_model_len;           /* 0: the model's max_position_embeddings */
  int32_t block_size;              /* default 16 */
  int32_t num_gpu_blocks_override; /* 0: size the cache from kv_cache_memory_bytes */
  int64_t kv_cache_memory_bytes;   /* default 1 GiB */
  int32_t enable_prefix_caching;   /* default 1 (ignored for hybrid models) */
  uint64_t seed;                   /* default 0 */
  const char* load_format;         /* "auto" (default) or "dummy" */
} vllm_engine_options;

/* Fills `options` with the defaults above. */
void vllm_engine_options_init(vllm_engine_options* options);

/* Loads a Hugging Face model folder and starts its engine thread. */
vllm_status vllm_engine_create(const char* model_dir, const vllm_engine_options* options,
                               vllm_engine** engine);

/* Stops the engine (requests still running are aborted) and frees it. NULL is a no-op. */
void vllm_engine_destroy(vllm_engine* engine);

/* Queues a request. `request_id` must be unique among live requests; `sampling_json` may
 * be NULL (vLLM's defaults: temperature 1, max_tokens 16). */
vllm_status vllm_submit(vllm_engine* engine, const char* request_id, const int32_t* prompt,
                        size_t prompt_len, const char* sampling_json);

/* Copies up to `capacity` tokens generated since the last poll into `tokens` and sets
 * *num_tokens; tokens that do not fit wait for the next poll. Waits up to timeout_ms
 * (0: do not wait, -1: forever) when nothing is new. *finished becomes 1 once every token has
 * been returned and the request has ended; then *finish_reason (if not NULL) points to a
 * static string, "stop", "length" or "abort", and the request id is forgotten. */
vllm_status vllm_poll(vllm_engine* engine, const char* request_id, int32_t timeout_ms,
                      int32_t* tokens, size_t capacity, size_t* num_tokens, int* finished,
                      const char** finish_reason);

/* Aborts a request; its next poll reports finished with reason "abort". */
vllm_status vllm_abort(vllm_engine* engine, const char* request_id);

/* Why the last failing call on this thread failed. */
const char* vllm_last_error(void);

#ifdef __cplusplus
}
#endif

#endif /* VLLM_H_ */
