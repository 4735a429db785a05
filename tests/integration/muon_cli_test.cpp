// Muon end to end: every layout trains as one process does, those that keep each matrix whole on the
// rank that updates it (ZeRO-1/2's owners, pipeline stages, expert-parallel holders) and those that
// split matrices over ranks (tp, ZeRO-3 also with its state streamed from files: optim/matrix_owners.h),
// and a resumed run continues the uninterrupted one, also at another layout.
#include <catch2/catch.hpp>

#include "parallel_runs.h"
#include "test_util.h"

using namespace gputrain::test;
using Catch::Contains;

namespace {

// The shared data-parallel recipe with Muon. The iteration in fp32: in bf16 it rounds every product to
// 8 bits, so float32 sums taken in another order (over ranks) flip roundings and the runs part by up to ~1e-4.
const std::vector<std::string> kMuon = {"optim.name=muon", "optim.lr=0.02", "optim.muon.adamw.lr=3e-3",
                                        "optim.muon.ns_dtype=fp32"};

}  // namespace

TEST_CASE(
    "muon: 2 processes (ZeRO-1/2/3, tp 2, pp 2, ep 2 also with ZeRO-3) and ZeRO-3 over 3 match 1 process, "
    "and a resumed run continues exactly",
    "[optim][muon][parallel][cli][slow]") {
  TempDir dir;
  write_file(dir.file("r.yaml"), dp_recipe());
  const CommandResult one = train(dir.file("r.yaml"), dir.file("one"), 0, with(kMuon, {"checkpoint.every=10"}));
  INFO(one.output);
  REQUIRE(one.exit_code == 0);
  CHECK(read_json(dir.file("one") + "/summary.json")["optimizer"].get<std::string>().rfind("muon, ", 0) == 0);
  const auto loss1 = column(dir.file("one"), "loss");
  const auto norm1 = column(dir.file("one"), "grad_norm");
  REQUIRE(loss1.size() == 20);
  CHECK(loss1.back() < loss1.front() - 1.0);  // it learns

  const std::vector<std::string> halves = with(kMuon, {"train.per_device_batch_size=2", "parallel.bucket_mb=0.01"});
  for (const char* zero : {"1", "2"}) {
    const Variant v{zero[0] == '1' ? "zero1" : "zero2", with(halves, {std::string("parallel.zero=") + zero})};
    train_like_one_process(dir, dir.file("r.yaml"), v, loss1, norm1, 1e-5);
    // Each rank keeps the momentum of the matrices it owns: about half of the state.
    const nlohmann::json summary = read_json(dir.file(v.name) + "/summary.json");
    const auto& m = summary["memory_per_rank"];
    const double whole = m[0]["optimizer_state_mb"].get<double>() + m[1]["optimizer_state_mb"].get<double>();
    for (int rank = 0; rank < 2; ++rank) CHECK(m[rank]["optimizer_state_mb"].get<double>() < 0.7 * whole);
  }
  // Matrices split over ranks: each gathered whole on one owner rank, orthogonalized there once, and
  // its shards sent back (tp: q, k, v heads and MLP columns; ZeRO-3: rows).
  train_like_one_process(dir, dir.file("r.yaml"), Variant{"tp2", with(kMuon, {"parallel.tp=2"})}, loss1, norm1, 1e-5);
  train_like_one_process(dir, dir.file("r.yaml"), Variant{"zero3", with(halves, {"parallel.zero=3"})}, loss1, norm1,
                         1e-5);
  // ZeRO-3 with the optimizer state streamed from files a unit at a time: each unit's update
  // exchanges its own matrices.
  train_like_one_process(dir, dir.file("r.yaml"),
                         Variant{"zero3-nvme", with(halves, {"parallel.zero=3", "parallel.offload_optimizer=nvme",
                                                             "parallel.offload_dir=" + dir.file("nvme-state")})},
                         loss1, norm1, 1e-5);
  train_like_one_process(dir, dir.file("r.yaml"),
                         Variant{"dp2-tp2-zero2", with(halves, {"parallel.tp=2", "parallel.zero=2"}), 4}, loss1, norm1,
                         1e-5);

  // Llama's fused q, k, v and gate, up: orthogonalized apart, also from tp's head shards and ZeRO-3's rows.
  const std::vector<std::string> llama = with(kMuon, {"model.arch=llama"});
  REQUIRE(train(dir.file("r.yaml"), dir.file("one-llama"), 0, llama).exit_code == 0);
  const auto llama_loss = column(dir.file("one-llama"), "loss"),
             llama_norm = column(dir.file("one-llama"), "grad_norm");
  train_like_one_process(dir, dir.file("r.yaml"), Variant{"llama-tp2", with(llama, {"parallel.tp=2"})}, llama_loss,
                         llama_norm, 1e-5);
  train_like_one_process(dir, dir.file("r.yaml"),
                         Variant{"llama-zero3", with(llama, {"train.per_device_batch_size=2", "parallel.zero=3"})},
                         llama_loss, llama_norm, 1e-5);

  // The default bf16 iteration: the same run, apart by bf16's flipped roundings only (measured 2026-12-08:
  // loss 3.2e-5, gradient norm 1.06e-4).
  const std::vector<std::string> bf16 = {"optim.name=muon", "optim.lr=0.02", "optim.muon.adamw.lr=3e-3"};
  REQUIRE(train(dir.file("r.yaml"), dir.file("one-bf16"), 0, bf16).exit_code == 0);
  train_like_one_process(dir, dir.file("r.yaml"),
                         Variant{"zero2-bf16", with(bf16, {"train.per_device_batch_size=2", "parallel.zero=2"})},
                         column(dir.file("one-bf16"), "loss"), column(dir.file("one-bf16"), "grad_norm"), 4e-4);
  train_like_one_process(
      dir, dir.file("r.yaml"),
      Variant{"pp2", with(kMuon, {"parallel.pp=2", "train.per_device_batch_size=1", "train.grad_accum_steps=4"})},
      loss1, norm1, 1e-5);

  // Experts split over 2 processes: each expert's matrices are updated by its holder.
  const std::vector<std::string> experts = with(
      kMuon, {"model.moe.experts=4", "model.moe.top_k=2", "model.moe.capacity_factor=0", "model.moe.aux_loss_coef=0"});
  REQUIRE(train(dir.file("r.yaml"), dir.file("one-moe"), 0, experts).exit_code == 0);
  train_like_one_process(dir, dir.file("r.yaml"),
                         Variant{"ep2", with(experts, {"train.per_device_batch_size=2", "parallel.ep=2"})},
                         column(dir.file("one-moe"), "loss"), column(dir.file("one-moe"), "grad_norm"), 1e-5);
  // And with ZeRO-3: the shared weights' rows spread over both ranks, each expert whole on its holder.
  train_like_one_process(
      dir, dir.file("r.yaml"),
      Variant{"ep2-zero3", with(experts, {"train.per_device_batch_size=2", "parallel.ep=2", "parallel.zero=3"})},
      column(dir.file("one-moe"), "loss"), column(dir.file("one-moe"), "grad_norm"), 1e-5);

  // ZeRO-3 over 3 ranks: rows that do not divide (the vocabulary's 256, the MLP's 128, the projections'
  // 32) leave the last shard padded, and the owner orthogonalizes the matrix without its padding rows
  // (with them its shape, and so Muon's scale max(1, rows/cols)^0.5, would be another).
  const std::vector<std::string> six = with(kMuon, {"train.per_device_batch_size=6"});
  REQUIRE(train(dir.file("r.yaml"), dir.file("one-six"), 0, six).exit_code == 0);
  train_like_one_process(dir, dir.file("r.yaml"),
                         Variant{"zero3-3ranks", with(kMuon, {"train.per_device_batch_size=2", "parallel.zero=3"}), 3},
                         column(dir.file("one-six"), "loss"), column(dir.file("one-six"), "grad_norm"), 1e-5);

  // Resumed at step 10 (momentum and AdamW moments from the checkpoint): bitwise on one process, and
  // as two ZeRO-2 processes within float32 noise.
  const std::string step10 = dir.file("one") + "/checkpoints/step_00000010";
  train_resumed(dir.file("r.yaml"), dir.file("resumed"), 0, with_resume(kMuon, step10), loss1, 10, 0);
  train_resumed(dir.file("r.yaml"), dir.file("resumed-zero2"), 2,
                with_resume(with(halves, {"parallel.zero=2"}), step10), loss1, 10, 1e-5);
  // At another layout: the whole momentum of the one-process checkpoint cut into tp's shards and
  // ZeRO-3's rows.
  train_resumed(dir.file("r.yaml"), dir.file("resumed-tp2"), 2, with_resume(with(kMuon, {"parallel.tp=2"}), step10),
                loss1, 10, 1e-5);
  train_resumed(dir.file("r.yaml"), dir.file("resumed-zero3"), 2,
                with_resume(with(halves, {"parallel.zero=3"}), step10), loss1, 10, 1e-5);
}
