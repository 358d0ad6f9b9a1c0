// Tests of the recipe table (train::recipe_fields): a row per TrainConfig member with a unique key
// and flag, the saved keys, --resume's merge of a checkpoint's recipe, validation messages, the
// resolved task and size, and `hpcnet train --help` / `train` on the binary.
#include <gtest/gtest.h>

#include <cstddef>
#include <filesystem>
#include <optional>
#include <regex>
#include <set>
#include <string>
#include <utility>
#include <vector>

#include "hpcnet/nn.h"
#include "hpcnet/train.h"
#include "test_util.h"

namespace fs = std::filesystem;
using namespace hpcnet;
using namespace hpcnet::test_util;
using train::FieldRole;
using train::RecipeField;
using train::TrainConfig;

namespace {

// The number of members of an aggregate: the largest N for which T{x1, ..., xN} compiles with
// values convertible to anything. It catches a member added to TrainConfig without a row here.
struct RcAny {
  template <class T>
  operator T() const;  // unevaluated only
};
template <class T, size_t... I>
constexpr bool rc_brace_constructible(std::index_sequence<I...>) {
  return requires { T{(static_cast<void>(I), RcAny{})...}; };
}
template <class T, size_t N = 0>
constexpr size_t rc_member_count() {
  if constexpr (rc_brace_constructible<T>(std::make_index_sequence<N + 1>{}))
    return rc_member_count<T, N + 1>();
  else
    return N;
}

using C = TrainConfig;
// Every member of TrainConfig but `given`, by hand (progress and quiet have no row: they are
// not part of a run's recipe) (C++ has no reflection; rc_member_count keeps
// this list complete).
const std::vector<std::pair<const char*, train::FieldRef>>& rc_members() {
  static const std::vector<std::pair<const char*, train::FieldRef>> m = {
      {"model", &C::model},
      {"task", &C::task},
      {"imgsz", &C::imgsz},
      {"dataset", &C::dataset},
      {"data", &C::data},
      {"out", &C::out},
      {"resume", &C::resume},
      {"weights", &C::weights},
      {"encoder_weights", &C::encoder_weights},
      {"freeze", &C::freeze},
      {"epochs", &C::epochs},
      {"batch_size", &C::batch_size},
      {"lr", &C::lr},
      {"momentum", &C::momentum},
      {"dampening", &C::dampening},
      {"lr_schedule", &C::lr_schedule},
      {"milestones", &C::milestones},
      {"lr_gamma", &C::lr_gamma},
      {"lr_min", &C::lr_min},
      {"warmup_epochs", &C::warmup_epochs},
      {"lrf", &C::lrf},
      {"warmup_bias_lr", &C::warmup_bias_lr},
      {"warmup_momentum", &C::warmup_momentum},
      {"param_groups", &C::param_groups},
      {"nbs", &C::nbs},
      {"ema_tau", &C::ema_tau},
      {"degrees", &C::degrees},
      {"translate", &C::translate},
      {"scale", &C::scale},
      {"shear", &C::shear},
      {"hsv_h", &C::hsv_h},
      {"hsv_s", &C::hsv_s},
      {"hsv_v", &C::hsv_v},
      {"fliplr", &C::fliplr},
      {"mosaic", &C::mosaic},
      {"close_mosaic", &C::close_mosaic},
      {"label_smoothing", &C::label_smoothing},
      {"weight_decay", &C::weight_decay},
      {"nesterov", &C::nesterov},
      {"optimizer", &C::optimizer},
      {"beta1", &C::beta1},
      {"beta2", &C::beta2},
      {"adam_eps", &C::adam_eps},
      {"clip_grad_norm", &C::clip_grad_norm},
      {"ema_decay", &C::ema_decay},
      {"cutout", &C::cutout},
      {"loss", &C::loss},
      {"class_weights", &C::class_weights},
      {"aux_loss", &C::aux_loss},
      {"zero_init_residual", &C::zero_init_residual},
      {"scale_min", &C::scale_min},
      {"scale_max", &C::scale_max},
      {"workers", &C::workers},
      {"cache", &C::cache},
      {"cache_dir", &C::cache_dir},
      {"shuffle_buffer", &C::shuffle_buffer},
      {"seed", &C::seed},
      {"log_every", &C::log_every},
      {"val_split", &C::val_split},
      {"augment", &C::augment},
      {"download", &C::download},
      {"download_url", &C::download_url},
      {"threads", &C::threads},
      {"device", &C::device},
      {"tf32", &C::tf32},
      {"deterministic", &C::deterministic},
      {"cuda_graph", &C::cuda_graph},
      {"max_image_pixels", &C::max_image_pixels},
      {"precision", &C::precision},
      {"conv_algorithm", &C::conv_algorithm},
      {"max_steps", &C::max_steps},
      {"save_every", &C::save_every},
      {"exist_ok", &C::exist_ok},
      {"progress", &C::progress},
      {"quiet", &C::quiet},
      {"dist_timeout", &C::dist_timeout},
      {"bucket_kb", &C::bucket_kb},
      {"sync_bn", &C::sync_bn},
      {"dist_backend", &C::dist_backend},
      {"nan_policy", &C::nan_policy},
      {"fail_at", &C::fail_at},
  };
  return m;
}

const RecipeField& rc_field(const std::string& key) {
  for (const RecipeField& f : train::recipe_fields())
    if (key == f.key) return f;
  throw std::runtime_error("no recipe field " + key);
}

// A config that validates (the two keys without defaults set).
TrainConfig rc_valid() {
  TrainConfig c;
  c.data = "/nowhere/data";
  c.out = "/nowhere/run";
  return c;
}

// A recipe different from the defaults in every saved field of interest.
TrainConfig rc_recipe() {
  TrainConfig c = rc_valid();
  c.model = "resnet20";
  c.task = "classify";
  c.imgsz = 40;
  c.dataset = "imagefolder";
  c.data = "/saved/data";
  c.epochs = 7;
  c.batch_size = 16;
  c.lr = 0.05;
  c.momentum = 0.8;
  c.weight_decay = 5e-4;
  c.nesterov = true;
  c.lr_schedule = "multistep";
  c.milestones = {3, 5};
  c.lr_gamma = 0.2;
  c.label_smoothing = 0.1;
  c.optimizer = "adamw";
  c.cutout = 8;
  c.workers = 3;
  c.seed = 12345678901234ULL;
  c.log_every = 10;
  c.val_split = 100;
  c.augment = "true";
  c.threads = 3;
  return c;
}

// The value of field f in c, as JSON (for comparing fields of any type).
nlohmann::json rc_value(const TrainConfig& c, const RecipeField& f) {
  return std::visit([&](auto m) { return nlohmann::json(c.*m); }, f.ref);
}

}  // namespace

// ---- the table ---------------------------------------------------------------------------------

// Keys and flags are unique, the flag is "--" + key with '-' for '_', and no two rows set the same
// member.
TEST(RecipeTable, UniqueKeysFlagsAndMembers) {
  std::set<std::string> keys, flags;
  const auto& fields = train::recipe_fields();
  for (size_t i = 0; i < fields.size(); ++i) {
    const RecipeField& f = fields[i];
    EXPECT_TRUE(keys.insert(f.key).second) << "duplicate key " << f.key;
    EXPECT_TRUE(flags.insert(f.flag()).second) << "duplicate flag " << f.flag();
    std::string want = std::string("--") + f.key;
    for (char& ch : want)
      if (ch == '_') ch = '-';
    EXPECT_EQ(f.flag(), want);
    EXPECT_TRUE(std::regex_match(std::string(f.key), std::regex("[a-z][a-z0-9_]*"))) << f.key;
    EXPECT_NE(std::string(f.help), "") << f.key;
    for (size_t j = 0; j < i; ++j)
      EXPECT_FALSE(fields[j].ref == f.ref)
          << f.key << " and " << fields[j].key << " share a member";
  }
  EXPECT_EQ(rc_field("batch_size").flag(), "--batch-size");
}

// train.h: "Every field but `given` is declared once more, in the recipe table".
TEST(RecipeTable, EveryTrainConfigMemberHasARow) {
  static_assert(rc_member_count<TrainConfig>() > 10, "the member count works on TrainConfig");
  EXPECT_EQ(rc_member_count<TrainConfig>(), rc_members().size() + 1)
      << "TrainConfig gained or lost a member: update rc_members() (and the recipe table)";
  std::string missing;
  for (const auto& [name, ref] : rc_members()) {
    // How this invocation shows itself (the CLI's --no-progress; benchmarks), not the recipe.
    if (std::string(name) == "progress" || std::string(name) == "quiet") continue;
    bool found = false;
    for (const RecipeField& f : train::recipe_fields()) found = found || f.ref == ref;
    if (!found) missing += std::string(missing.empty() ? "" : ", ") + name;
  }
  EXPECT_EQ(missing, "") << "TrainConfig members without a row in recipe_fields()";
}

// recipe_json holds exactly the keys of the rows that are not kSession, with the config's values.
TEST(RecipeTable, RecipeJsonHoldsTheSavedKeys) {
  const TrainConfig c = rc_recipe();
  const nlohmann::json j = train::recipe_json(c);
  std::set<std::string> want, got;
  for (const RecipeField& f : train::recipe_fields())
    if (f.role != FieldRole::kSession) want.insert(f.key);
  for (auto& [k, v] : j.items()) got.insert(k);
  EXPECT_EQ(got, want);
  for (const char* session : {"out", "resume", "device", "steps", "download", "fail_at_step"})
    EXPECT_FALSE(j.contains(session)) << session;
  EXPECT_EQ(j.at("batch_size"), 16);
  EXPECT_EQ(j.at("milestones"), nlohmann::json({3, 5}));
  EXPECT_EQ(j.at("seed").get<uint64_t>(), 12345678901234ULL);
  EXPECT_EQ(j.at("nesterov"), true);
  EXPECT_EQ(j.at("workers"), 3);  // kLog: saved for the record
}

// ---- --resume: merging a checkpoint's recipe ----------------------------------------------------

// Nothing given: every kRecipe and kRun field comes back from the saved JSON, exactly; kLog and
// kSession fields are not taken; out defaults to the resumed directory.
TEST(RecipeResume, NothingGivenTakesTheSavedRecipe) {
  const TrainConfig saved = rc_recipe();
  TrainConfig c;
  c.resume = "/runs/a";
  c.given = std::set<std::string>{"resume"};
  train::merge_resumed_recipe(c, train::recipe_json(saved), "ckpt");
  for (const RecipeField& f : train::recipe_fields()) {
    if (f.role == FieldRole::kRecipe || f.role == FieldRole::kRun) {
      EXPECT_EQ(rc_value(c, f), rc_value(saved, f)) << f.key;
    }
  }
  EXPECT_EQ(c.workers, TrainConfig{}.workers) << "kLog is not taken";
  EXPECT_EQ(c.out, "/runs/a");
}

// A given recipe key that differs from the checkpoint's is refused naming the flag and the
// checkpoint; an equal one is fine.
TEST(RecipeResume, AGivenRecipeKeyThatDiffersIsRefused) {
  const nlohmann::json saved = train::recipe_json(rc_recipe());
  TrainConfig c;
  c.lr = 0.5;
  c.given = std::set<std::string>{"lr"};
  std::string e = input_error([&] { train::merge_resumed_recipe(c, saved, "runs/a/ckpt"); });
  EXPECT_NE(e.find("--lr"), std::string::npos) << e;
  EXPECT_NE(e.find("runs/a/ckpt"), std::string::npos) << e;
  c.batch_size = 3;
  c.lr = 0.05;
  c.given = std::set<std::string>{"lr", "batch_size"};
  e = input_error([&] { train::merge_resumed_recipe(c, saved, "ckpt"); });
  EXPECT_NE(e.find("--batch-size"), std::string::npos) << e;
  c.batch_size = 16;
  EXPECT_EQ(input_error([&] { train::merge_resumed_recipe(c, saved, "ckpt"); }), "no exception");
  EXPECT_EQ(c.momentum, 0.8);  // the rest from the checkpoint
}

// kRun fields (data, epochs, threads) come from the checkpoint unless given; given, they win.
TEST(RecipeResume, RunKeysAreTakenUnlessGiven) {
  const nlohmann::json saved = train::recipe_json(rc_recipe());
  TrainConfig c;
  c.epochs = 9;
  c.data = "/moved/data";
  c.given = std::set<std::string>{"epochs", "data"};
  train::merge_resumed_recipe(c, saved, "ckpt");
  EXPECT_EQ(c.epochs, 9);
  EXPECT_EQ(c.data, "/moved/data");
  EXPECT_EQ(c.threads, 3) << "not given: the run's";
  for (const char* k : {"data", "epochs", "threads"}) EXPECT_EQ(rc_field(k).role, FieldRole::kRun);
}

// A corrupt recipe: not an object, a required key missing ("lacks"), a value of the wrong type.
// Keys that are not required may be missing (older checkpoints): the default stays.
TEST(RecipeResume, CorruptRecipes) {
  const nlohmann::json saved = train::recipe_json(rc_recipe());
  TrainConfig c;
  c.given = std::set<std::string>{};
  std::string e =
      input_error([&] { train::merge_resumed_recipe(c, nlohmann::json::array(), "ck"); });
  EXPECT_NE(e.find("not a JSON object"), std::string::npos) << e;
  for (const RecipeField& f : train::recipe_fields()) {
    if (!(f.flags & train::kRequired)) continue;
    nlohmann::json s = saved;
    s.erase(f.key);
    TrainConfig d;
    d.given = std::set<std::string>{};
    e = input_error([&] { train::merge_resumed_recipe(d, s, "ck"); });
    EXPECT_NE(e.find(std::string("lacks ") + f.key), std::string::npos) << f.key << ": " << e;
    EXPECT_NE(e.find("ck"), std::string::npos) << e;
  }
  for (const char* key : {"batch_size", "model", "nesterov", "milestones", "lr"}) {
    nlohmann::json s = saved;
    s[key] = std::string(key) == "model" ? nlohmann::json(3) : nlohmann::json("three");
    TrainConfig d;
    d.given = std::set<std::string>{};
    e = input_error([&] { train::merge_resumed_recipe(d, s, "ck"); });
    EXPECT_NE(e.find("wrong type"), std::string::npos) << key << ": " << e;
    EXPECT_NE(e.find(key), std::string::npos) << e;
  }
  nlohmann::json s = saved;
  s.erase("optimizer");  // not required: added after the first format
  TrainConfig d;
  d.given = std::set<std::string>{};
  train::merge_resumed_recipe(d, s, "ck");
  EXPECT_EQ(d.optimizer, "sgd");
  EXPECT_EQ(d.batch_size, 16);
  // conv_algorithm's default became auto after the key was added: a checkpoint without it ran
  // direct convolutions, and resumes so (bit-exact); a given --conv-algorithm auto is refused.
  s.erase("conv_algorithm");
  TrainConfig old_run;
  old_run.given = std::set<std::string>{};
  train::merge_resumed_recipe(old_run, s, "ck");
  EXPECT_EQ(old_run.conv_algorithm, "direct");
  EXPECT_EQ(TrainConfig{}.conv_algorithm, "auto");
  TrainConfig changed;
  changed.given = std::set<std::string>{"conv_algorithm"};
  changed.conv_algorithm = "auto";
  e = input_error([&] { train::merge_resumed_recipe(changed, s, "ck"); });
  EXPECT_NE(e.find("--conv-algorithm differs"), std::string::npos) << e;
}

// kAuto fields at their default ("decided later": task "", imgsz 0) never conflict, even when
// given: the checkpoint's value is taken.
TEST(RecipeResume, AutoDefaultsNeverConflict) {
  const nlohmann::json saved = train::recipe_json(rc_recipe());  // task classify, imgsz 40
  TrainConfig c;
  c.model = "resnet20";
  c.given = std::set<std::string>{"task", "imgsz", "model"};
  EXPECT_EQ(input_error([&] { train::merge_resumed_recipe(c, saved, "ck"); }), "no exception");
  EXPECT_EQ(c.task, "classify");
  EXPECT_EQ(c.imgsz, 40);
  EXPECT_TRUE(rc_field("task").flags & train::kAuto);
  EXPECT_TRUE(rc_field("imgsz").flags & train::kAuto);
  // A non-default value that differs does conflict.
  TrainConfig d;
  d.model = "resnet20";
  d.imgsz = 48;
  d.given = std::set<std::string>{"imgsz", "model"};
  EXPECT_NE(input_error([&] { train::merge_resumed_recipe(d, saved, "ck"); }).find("--imgsz"),
            std::string::npos);
}

// A run started without --imgsz saves imgsz 0 (its model's default, 32 for lenet). Resuming it with
// --imgsz 32 asks for the size the run has: that is no change of recipe; --imgsz 64 is one.
TEST(RecipeResume, AutoValueInTheCheckpointMatchesTheValueItResolvedTo) {
  TrainConfig run = rc_valid();  // lenet, task "", imgsz 0
  const nlohmann::json saved = train::recipe_json(run);
  ASSERT_EQ(saved.at("imgsz"), 0);
  TrainConfig same;
  same.imgsz = 32;
  same.given = std::set<std::string>{"imgsz"};
  EXPECT_EQ(input_error([&] { train::merge_resumed_recipe(same, saved, "ck"); }), "no exception")
      << "--imgsz 32 is the size a lenet run without --imgsz trained at";
  TrainConfig other;
  other.model = "resnet20";
  run.model = "resnet20";
  other.imgsz = 64;
  other.given = std::set<std::string>{"imgsz"};
  EXPECT_NE(input_error([&] {
              train::merge_resumed_recipe(other, train::recipe_json(run), "ck");
            }).find("--imgsz"),
            std::string::npos)
      << "the run trained at 32";
}

// given = nullopt means every field was set deliberately: recipe keys are compared, and run keys
// are kept rather than taken.
TEST(RecipeResume, NoGivenSetMeansEverythingGiven) {
  const TrainConfig r = rc_recipe();
  const nlohmann::json saved = train::recipe_json(r);
  TrainConfig c = r;
  c.epochs = 20;
  c.threads = 1;
  ASSERT_FALSE(c.given.has_value());
  train::merge_resumed_recipe(c, saved, "ck");
  EXPECT_EQ(c.epochs, 20);
  EXPECT_EQ(c.threads, 1);
  c.lr = 0.06;
  const std::string e = input_error([&] { train::merge_resumed_recipe(c, saved, "ck"); });
  EXPECT_NE(e.find("--lr"), std::string::npos) << e;
}

// ---- validation --------------------------------------------------------------------------------

TEST(RecipeValidate, MessagesNameTheFlag) {
  EXPECT_EQ(input_error([] { train::validate(rc_valid()); }), "no exception");
  struct Case {
    void (*set)(TrainConfig&);
    std::vector<std::string> parts;
  };
  const Case cases[] = {
      {[](C& c) { c.batch_size = 0; }, {"--batch-size", "0"}},
      {[](C& c) { c.epochs = 0; }, {"--epochs"}},
      {[](C& c) { c.lr = -1; }, {"--lr"}},
      {[](C& c) { c.momentum = 1.5; }, {"--momentum", "1.5"}},
      {[](C& c) { c.workers = 65; }, {"--workers"}},
      {[](C& c) { c.label_smoothing = 2; }, {"--label-smoothing"}},
      {[](C& c) { c.optimizer = "adam"; }, {"--optimizer", "'adam'"}},
      {[](C& c) { c.precision = "fp16"; }, {"--precision", "fp16"}},
      {[](C& c) { c.conv_algorithm = "fft"; }, {"--conv-algorithm", "fft"}},
      {[](C& c) { c.cutout = -1; }, {"--cutout"}},
      {[](C& c) { c.imgsz = -1; }, {"--imgsz"}},
      {[](C& c) { c.log_every = 0; }, {"--log-every"}},
      {[](C& c) { c.ema_decay = 1; }, {"--ema-decay"}},
      {[](C& c) { c.data = ""; }, {"--data"}},
      {[](C& c) { c.out = ""; }, {"--out"}},
      {[](C& c) { c.model = "resnet999"; }, {"resnet999", "resnet20"}},
      {[](C& c) { c.task = "detect"; }, {"detect", "classify"}},
      {[](C& c) { c.dataset = "mnist"; }, {"mnist"}},
      {[](C& c) { c.imgsz = 64; }, {"--imgsz 64", "lenet", "32x32"}},
      {[](C& c) { c.lr_schedule = "bogus"; }, {"bogus"}},
      {[](C& c) { c.loss = "focal"; }, {"--loss", "'focal'", "ce+dice"}},
      {[](C& c) { c.class_weights = "1,x,2"; }, {"--class-weights", "'x'"}},
      {[](C& c) { c.class_weights = "1,-2"; }, {"--class-weights", "'-2'"}},
      {[](C& c) { c.class_weights = "0,0"; }, {"--class-weights", "all be 0"}},
      {[](C& c) { c.aux_loss = true; }, {"--aux-loss", "deeplabv3", "lenet"}},
      {[](C& c) { c.zero_init_residual = true; }, {"--zero-init-residual", "resnet50", "lenet"}},
      {[](C& c) { c.scale_min = 0; }, {"--scale-min"}},
      {[](C& c) { c.scale_min = 2, c.scale_max = 1; }, {"--scale-min", "--scale-max"}},
  };
  for (const Case& k : cases) {
    TrainConfig c = rc_valid();
    k.set(c);
    const std::string e = input_error([&] { train::validate(c); });
    for (const std::string& p : k.parts) EXPECT_NE(e.find(p), std::string::npos) << p << ": " << e;
  }
  TrainConfig r = rc_valid();
  r.model = "resnet20";
  r.imgsz = 64;  // not fixed-size
  EXPECT_EQ(input_error([&] { train::validate(r); }), "no exception");
}

// Task "" and imgsz 0 resolve to the model's; task_options carries the task's fields.
TEST(RecipeValidate, ResolvedTaskImgszAndTaskOptions) {
  TrainConfig c;
  EXPECT_EQ(train::resolved_task(c), "classify");
  EXPECT_EQ(train::resolved_imgsz(c), 32);
  c.model = "resnet20";
  c.imgsz = 48;
  c.augment = "true";
  c.cutout = 8;
  c.label_smoothing = 0.1;
  EXPECT_EQ(train::resolved_imgsz(c), 48);
  const task::TaskOptions o = train::task_options(c);
  EXPECT_EQ(o.imgsz, 48);
  EXPECT_EQ(o.augment, "default");
  EXPECT_EQ(o.classify.cutout, 8);
  EXPECT_EQ(o.classify.label_smoothing, 0.1);
  c.imgsz = 0;
  EXPECT_EQ(train::task_options(c).imgsz, 32);
  c.loss = "ce+dice";
  c.class_weights = "0.5, 1,2";
  c.scale_min = 0.5;
  c.scale_max = 2;
  const task::TaskOptions s = train::task_options(c);
  EXPECT_EQ(s.segment.loss, "ce+dice");
  EXPECT_EQ(s.segment.class_weights, (std::vector<double>{0.5, 1, 2}));
  EXPECT_EQ(s.segment.scale_min, 0.5);
  EXPECT_EQ(s.segment.scale_max, 2);
  EXPECT_TRUE(train::parse_class_weights("").empty());
}

// ---- the CLI -----------------------------------------------------------------------------------

// `hpcnet train --help` lists the flag of every row but the hidden ones.
TEST(RecipeCli, TrainHelpListsEveryFlagOfTheTable) {
  TempDir tmp("recipe_cli");
  const RunResult r = run_hpcnet({"train", "--help"}, tmp.path());
  ASSERT_EQ(r.rc, 0) << r.err;
  int hidden = 0;
  for (const RecipeField& f : train::recipe_fields()) {
    // The flag as a whole word: "--lr" must not be found inside "--lr-schedule".
    const std::regex word("(^|[\\s,])" + f.flag() + "([\\s,=]|$)");
    const bool listed = std::regex_search(r.out, word);
    if (f.flags & train::kHidden) {
      ++hidden;
      EXPECT_FALSE(listed) << f.flag() << " is hidden";
    } else {
      EXPECT_TRUE(listed) << f.flag() << " is missing from\n" << r.out;
    }
  }
  EXPECT_EQ(hidden, 1);  // --fail-at-step
}

namespace {

// The line of `--help` output that describes flag ("" when none does).
std::string help_line(const std::string& out, const std::string& flag) {
  for (const std::string& l : split_lines(out))
    if (l.rfind("  " + flag + " ", 0) == 0) return l;
  return "";
}

// A fresh run of the task from the CLI (nothing else given): what it trains with.
TrainConfig fresh(const std::string& task) {
  TrainConfig c;
  c.task = task;
  c.given = std::set<std::string>{"task"};
  train::apply_task_defaults(c);
  return c;
}

}  // namespace

// `hpcnet --help` names the program; `train --help` lists every model by task and, where a
// default differs by task, each task's, read from the tables the run applies (here: the values a
// fresh run of each task takes, and the model registry's sizes).
TEST(RecipeCli, HelpShowsEachTasksDefaultsFromTheRunsTables) {
  TempDir tmp("recipe_cli");
  RunResult r = run_hpcnet({"--help"}, tmp.path());
  ASSERT_EQ(r.rc, 0) << r.err;
  EXPECT_NE(r.out.find("Usage: hpcnet [OPTIONS] SUBCOMMAND"), std::string::npos) << r.out;
  r = run_hpcnet({"train", "--help"}, tmp.path());
  ASSERT_EQ(r.rc, 0) << r.err;
  EXPECT_NE(r.out.find("Usage: hpcnet train [OPTIONS]"), std::string::npos) << r.out;
  const std::string model = help_line(r.out, "--model");
  for (const std::string& m : nn::model_names())
    EXPECT_NE(model.find(m), std::string::npos) << m << " in: " << model;
  EXPECT_NE(model.find("detect: yolov8n, yolov8s"), std::string::npos) << model;
  EXPECT_NE(help_line(r.out, "--task").find("classify, segment, detect"), std::string::npos);

  const TrainConfig c = fresh("classify"), s = fresh("segment"), d = fresh("detect");
  EXPECT_EQ(c.model, "lenet");
  EXPECT_EQ(d.epochs, 100);
  auto expect_defaults = [&](const std::string& flag, const std::string& want) {
    const std::string line = help_line(r.out, flag);
    EXPECT_NE(line.find("[default: " + want + "]"), std::string::npos)
        << flag << ": want " << want << " in: " << line;
    EXPECT_FALSE(std::regex_search(line, std::regex("[A-Z]=")))
        << "no single default shown: " << line;
  };
  expect_defaults("--model",
                  c.model + " (classify), " + s.model + " (segment), " + d.model + " (detect)");
  expect_defaults("--imgsz", std::to_string(nn::model_info(c.model).imgsz) + " (classify), " +
                                 std::to_string(nn::model_info(d.model).imgsz) +
                                 " (segment, detect)");
  expect_defaults("--dataset", c.dataset + " (classify), " + s.dataset + " (segment), " +
                                   d.dataset + " (detect)");
  expect_defaults("--epochs", std::to_string(c.epochs) + " (classify, segment), " +
                                  std::to_string(d.epochs) + " (detect)");
  expect_defaults("--batch-size", std::to_string(c.batch_size) + " (classify, segment), " +
                                      std::to_string(d.batch_size) + " (detect)");
  expect_defaults("--mosaic", "0 (classify, segment), 1 (detect)");
  expect_defaults("--nesterov", "off (classify, segment), on (detect)");
  EXPECT_EQ(d.mosaic, 1.0);
  // A default every task shares is shown as before.
  EXPECT_NE(help_line(r.out, "--lr-gamma").find("FLOAT=0.1"), std::string::npos) << r.out;
  EXPECT_NE(help_line(r.out, "--workers").find("INT=2"), std::string::npos) << r.out;
  // eval reads --data as the model's task's dataset; its help says which.
  r = run_hpcnet({"eval", "--help"}, tmp.path());
  ASSERT_EQ(r.rc, 0) << r.err;
  EXPECT_NE(r.out.find("Usage: hpcnet eval [OPTIONS]"), std::string::npos) << r.out;
  EXPECT_NE(help_line(r.out, "--dataset")
                .find("cifar10 (classify), segmentation (segment), detect (detect)"),
            std::string::npos)
      << r.out;
}

// --imgsz 64 with lenet (fixed at 32x32) is refused before anything is written.
TEST(RecipeCli, ImgszOfAFixedSizeModelIsRefused) {
  TempDir tmp("recipe_cli");
  const RunResult r = run_hpcnet({"train", "--model", "lenet", "--imgsz", "64", "--data",
                                  tmp.str("data"), "--out", tmp.str("run")},
                                 tmp.path());
  expect_refused(r, "--imgsz 64 with lenet", {"lenet", "--imgsz"});
  EXPECT_FALSE(fs::exists(tmp / "run"));
}

// A key absent from an older checkpoint stands for the default the run used: a given flag must
// equal that default (--optimizer adamw on a run from before --optimizer is refused, sgd is not),
// and a kAuto field given explicitly must resolve to what the default resolved to.
TEST(RecipeResume, AGivenFlagIsComparedWithTheDefaultOfAnAbsentKey) {
  nlohmann::json s = train::recipe_json(rc_recipe());
  s.erase("optimizer");
  s.erase("imgsz");
  s.erase("task");
  TrainConfig d;
  d.given = std::set<std::string>{"optimizer"};
  d.optimizer = "adamw";
  std::string e = input_error([&] { train::merge_resumed_recipe(d, s, "ck"); });
  EXPECT_NE(e.find("--optimizer differs"), std::string::npos) << e;
  TrainConfig ok;
  ok.given = std::set<std::string>{"optimizer"};
  ok.optimizer = "sgd";
  EXPECT_EQ(input_error([&] { train::merge_resumed_recipe(ok, s, "ck"); }), "no exception");
  // resnet20 (the saved model) resolves imgsz 0 to 32: --imgsz 32 is the same run, 64 is not.
  TrainConfig same;
  same.given = std::set<std::string>{"imgsz"};
  same.imgsz = 32;
  EXPECT_EQ(input_error([&] { train::merge_resumed_recipe(same, s, "ck"); }), "no exception");
  EXPECT_EQ(train::resolved_imgsz(same), 32);
  TrainConfig other;
  other.given = std::set<std::string>{"imgsz"};
  other.imgsz = 64;
  e = input_error([&] { train::merge_resumed_recipe(other, s, "ck"); });
  EXPECT_NE(e.find("--imgsz differs"), std::string::npos) << e;
}

// The task defaults of a fresh CLI run: --task alone takes the task's model; a segmentation or
// detection model reads --data as its task's dataset unless --dataset says otherwise; nothing is
// applied without a given set (API callers) nor over a given value.
TEST(RecipeValidate, TaskDefaultsFollowTheModelOrTheTask) {
  TrainConfig c = fresh("segment");
  c.data = "DIR";
  c.out = "RUN";
  EXPECT_EQ(c.model, "unet_resnet18");
  EXPECT_EQ(c.dataset, "segmentation");
  EXPECT_EQ(c.epochs, TrainConfig{}.epochs);
  EXPECT_NO_THROW(train::validate(c));
  c = TrainConfig{};
  c.model = "deeplabv3_resnet50";
  c.given = std::set<std::string>{"model"};
  train::apply_task_defaults(c);
  EXPECT_EQ(c.dataset, "segmentation");
  c = TrainConfig{};
  c.model = "unet_resnet34";
  c.dataset = "voc";
  c.given = std::set<std::string>{"model", "dataset"};
  train::apply_task_defaults(c);
  EXPECT_EQ(c.dataset, "voc");
  c = fresh("detect");
  EXPECT_EQ(c.model, "yolov8n");
  EXPECT_EQ(c.dataset, "detect");
  c = TrainConfig{};
  c.model = "unet_resnet18";
  train::apply_task_defaults(c);  // no given set: nothing changes
  EXPECT_EQ(c.dataset, "cifar10");
  EXPECT_EQ(train::task_default("segment", "dataset"), "segmentation");
  EXPECT_EQ(train::task_default("classify", "dataset"), "cifar10");
  EXPECT_EQ(train::task_default("detect", "epochs"), "100");
}

TEST(RecipeValidate, UnetSizesAreMultiplesOf32) {
  TrainConfig c = rc_valid();
  c.model = "unet_resnet18";
  c.dataset = "segmentation";
  c.imgsz = 100;
  std::string e = input_error([&] { train::validate(c); });
  EXPECT_NE(e.find("--imgsz 100"), std::string::npos) << e;
  EXPECT_NE(e.find("multiples of 32"), std::string::npos) << e;
  c.imgsz = 96;
  EXPECT_EQ(input_error([&] { train::validate(c); }), "no exception");
}
