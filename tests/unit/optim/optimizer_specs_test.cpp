// The optimizer registry (optim/optimizer_specs.h) against the schema and the docs: every optim.name
// has a spec, every key a spec claims is a schema key, every optimizer-specific key is claimed,
// and docs/training.md's table is the one the specs print.
#include <catch2/catch.hpp>

#include <map>
#include <set>

#include "config/schema.h"
#include "optim/make_optimizer.h"
#include "objective/objectives.h"
#include "optim/optimizer_specs.h"
#include "test_util.h"

using namespace gputrain;

TEST_CASE("optimizer specs: one per optim.name, each claiming schema keys, every specific key claimed", "[optim]") {
  const FieldSpec* name = find_field("optim.name");
  REQUIRE(name);
  std::set<std::string> named, specced;
  for (const auto& n : name->value_schema.at("enum")) named.insert(n.get<std::string>());
  for (const OptimizerSpec* spec : optimizer_specs()) {
    const std::string n = optim_name(spec->name);
    INFO(n);
    CHECK(specced.insert(n).second);  // registered once
    CHECK(&optimizer_spec(spec->name) == spec);
    CHECK((spec->foreach || spec->fused));  // a kernel to run
    REQUIRE(spec->make);
    REQUIRE(spec->state_rule);
    REQUIRE(spec->state_bytes);
    for (const auto& key : spec->keys) {
      INFO(key);
      OptimizerSpec claiming_only_it;
      claiming_only_it.keys = {key};
      bool in_schema = false;
      for (const FieldSpec& f : schema()) in_schema = in_schema || claiming_only_it.reads(f.path);
      CHECK(in_schema);
    }
  }
  CHECK(specced == named);
  // A new optim.* key is either read by every optimizer or claimed by the ones that read it.
  const std::set<std::string> shared = {"optim.name", "optim.impl", "optim.lr", "optim.weight_decay",
                                        "optim.decay_embeddings"};
  for (const FieldSpec& f : schema()) {
    if (f.path.rfind("optim.", 0) != 0 || shared.count(f.path) || f.path.rfind("optim.schedule.", 0) == 0) continue;
    INFO(f.path);
    bool claimed = false;
    for (const OptimizerSpec* spec : optimizer_specs()) claimed = claimed || spec->reads(f.path);
    CHECK(claimed);
  }
}

TEST_CASE("docs/training.md's optimizer table is what `gputrain optim list` prints", "[optim]") {
  const std::string page = test::read_file(std::string(GPUTRAIN_SOURCE_DIR) + "/docs/training.md");
  INFO("paste `build/gputrain optim list` into docs/training.md's Optimizers section:\n" << optimizer_table_markdown());
  CHECK(page.find(optimizer_table_markdown()) != std::string::npos);
  CHECK_THAT(optimizer_table_markdown(), Catch::Matchers::Contains("| `adamw8bit` | 2 x (1 byte + 4/256)") &&
                                             Catch::Matchers::Contains("`optim.lion.betas` [0.9,0.99]"));
}

TEST_CASE("optimizer specs: validation asks the chosen optimizer about the optim keys the recipe changed", "[optim]") {
  OptimSettings o;
  o.name = OptimName::kAdafactor;
  o.adafactor.relative_step = true;
  std::set<std::string> set = {"optim.lr", "optim.lion.betas", "optim.adafactor.beta1", "optim.betas"};
  auto changed = [&](const std::string& key) { return set.count(key) > 0; };
  std::map<std::string, std::string> found;
  for (const auto& p : recipe_rules().optimizer.check(o, changed)) {
    CHECK_FALSE(p.error);
    found[p.key] = p.problem + " / " + p.fix;
  }
  CHECK(found.size() == 3);  // not its own optim.adafactor.beta1
  CHECK_THAT(found["optim.lion.betas"], Catch::Matchers::Contains("has no effect with optim.name: adafactor"));
  CHECK_THAT(found["optim.betas"], Catch::Matchers::Contains("has no effect with optim.name: adafactor"));
  CHECK_THAT(found["optim.lr"], Catch::Matchers::Contains("relative_step sets the step size"));
  set.erase("optim.lr");  // the recipe left lr alone: nothing to say about it
  CHECK(recipe_rules().optimizer.check(o, changed).size() == 2);
  // adamw reads optim.betas (lion's and adafactor's keys are still foreign); sgd's nesterov without momentum is
  // an error.
  o.name = OptimName::kAdamW;
  CHECK(recipe_rules().optimizer.check(o, changed).size() == 2);
  o.name = OptimName::kSgd;
  o.sgd.momentum = 0;
  o.sgd.nesterov = true;
  bool nesterov_error = false;
  for (const auto& p : recipe_rules().optimizer.check(o, changed))
    nesterov_error = nesterov_error || (p.key == "optim.sgd.nesterov" && p.error);
  CHECK(nesterov_error);
}
