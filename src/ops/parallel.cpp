// Tensor-parallel collectives of the op layer (ops.h): they go to the context's communicator,
// whose implementation knows the device (the shared-memory one: CPU tensors).
#include "ops/ops.h"
#include "parallel/communicator.h"

namespace vllm::ops {

Status all_reduce(const ExecContext& ctx, Tensor& x) {
  if (ctx.comm == nullptr || ctx.comm->world_size() == 1) return Status::ok();
  return ctx.comm->all_reduce(ctx, x);
}

Status all_gather(const ExecContext& ctx, const Tensor& x, Tensor& out) {
  if (ctx.comm != nullptr && ctx.comm->world_size() > 1) return ctx.comm->all_gather(ctx, x, out);
  if (out.ndim() != x.ndim() + 1 || out.size(0) != 1) {
    return make_error(ErrorCode::kInvalidArgument, "all_gather: out is {}, expected [1, ...{}]",
                      out.to_string(), shape_to_string(x.shape()));
  }
  Tensor dst = out.view(x.shape());
  return copy(ctx, x, dst);
}

}  // namespace vllm::ops
