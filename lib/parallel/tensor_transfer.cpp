#include "parallel/tensor_transfer.h"

#include <nlohmann/json.hpp>

#include <cstring>

namespace gputrain {
namespace {

using json = nlohmann::ordered_json;

// A tensor's bytes as a flat uint8 tensor (0-dim tensors included).
torch::Tensor as_bytes(const torch::Tensor& t) { return t.contiguous().reshape({-1}).view(torch::kByte); }

}  // namespace

void send_tensors(Communicator& comm, const std::vector<NamedTensor>& tensors, int dst, int tag,
                  const std::string& what) {
  const torch::Device dev = comm.tensor_device();
  json meta = json::array();
  std::vector<torch::Tensor> bytes;
  for (const auto& e : tensors) {
    meta.push_back({e.name, static_cast<int>(e.tensor.scalar_type()), e.tensor.sizes().vec()});
    bytes.push_back(as_bytes(e.tensor.detach()).to(dev));
  }
  const std::string text = meta.dump();
  torch::Tensor data =
      bytes.empty() ? torch::empty({0}, torch::TensorOptions().dtype(torch::kByte).device(dev)) : torch::cat(bytes);
  torch::Tensor text_t =
      torch::from_blob(const_cast<char*>(text.data()), {static_cast<int64_t>(text.size())}, torch::kByte)
          .to(dev)
          .clone();
  torch::Tensor sizes = torch::tensor({static_cast<int64_t>(text.size()), data.numel()}, torch::kLong).to(dev);
  comm.send(sizes, dst, tag, what).wait();
  comm.send(text_t, dst, tag + 1, what).wait();
  comm.send(data, dst, tag + 2, what).wait();
}

std::vector<NamedTensor> receive_tensors(Communicator& comm, int src, int tag, const std::string& what) {
  const torch::Device dev = comm.tensor_device();
  const auto u8 = torch::TensorOptions().dtype(torch::kByte).device(dev);
  torch::Tensor sizes = torch::empty({2}, torch::TensorOptions().dtype(torch::kLong).device(dev));
  comm.recv(sizes, src, tag, what).wait();
  const torch::Tensor host_sizes = sizes.cpu();
  torch::Tensor text_t = torch::empty({host_sizes[0].item<int64_t>()}, u8);
  torch::Tensor data = torch::empty({host_sizes[1].item<int64_t>()}, u8);
  comm.recv(text_t, src, tag + 1, what).wait();
  comm.recv(data, src, tag + 2, what).wait();
  const torch::Tensor host_text = text_t.cpu();
  const torch::Tensor host_data = data.cpu();
  const json meta = json::parse(std::string(reinterpret_cast<const char*>(host_text.data_ptr<uint8_t>()),
                                            static_cast<size_t>(host_text.numel())));
  std::vector<NamedTensor> out;
  int64_t offset = 0;
  for (const auto& m : meta) {
    const auto dtype = static_cast<torch::ScalarType>(m[1].get<int>());
    const std::vector<int64_t> shape = m[2].get<std::vector<int64_t>>();
    int64_t numel = 1;
    for (int64_t d : shape) numel *= d;
    const int64_t n = numel * static_cast<int64_t>(c10::elementSize(dtype));
    out.push_back({m[0].get<std::string>(), host_data.narrow(0, offset, n).clone().view(dtype).reshape(shape)});
    offset += n;
  }
  return out;
}

std::string broadcast_text(Communicator& comm, const std::string& text, int root, const std::string& what) {
  const bool sender = comm.rank() == root;
  torch::Tensor size = torch::tensor({static_cast<int64_t>(sender ? text.size() : 0)}, torch::kLong);
  size = size.to(comm.tensor_device());
  comm.broadcast_now(size, root, what);
  torch::Tensor bytes = torch::zeros({size.item<int64_t>()}, torch::kUInt8);
  if (sender && !text.empty()) std::memcpy(bytes.data_ptr(), text.data(), text.size());
  bytes = bytes.to(comm.tensor_device());
  comm.broadcast_now(bytes, root, what);
  bytes = bytes.cpu();
  return std::string(static_cast<const char*>(bytes.data_ptr()), static_cast<size_t>(bytes.numel()));
}

}  // namespace gputrain
