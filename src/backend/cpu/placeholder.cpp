int vllm_cpu_placeholder;
