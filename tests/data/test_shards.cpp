// WebDataset shards: brace expansion, grouping members by key as webdataset does, round trips
// through `hpcnet shard` (image folder, YOLO, segmentation: same targets and pixels, in order),
// --shard-size, corrupt shards refused naming shard and key, and webdataset.TarWriter's fixture.
#include <archive.h>
#include <archive_entry.h>
#include <gtest/gtest.h>

#include <algorithm>
#include <numeric>
#include <set>
#include <string>
#include <vector>

#include "hpcnet/shards.h"
#include "src/data/internal.h"
#include "src/data/shards.h"
#include "src/data/tar_index.h"
#include "test_paths.h"
#include "test_util.h"

using namespace hpcnet;
using namespace hpcnet::test_util;
namespace ddt = hpcnet::data::detail;

namespace {

using Names = std::vector<std::string>;

// A ustar tar of (path, bytes) members, as libarchive writes it.
std::string make_tar(const std::vector<std::pair<std::string, std::string>>& members) {
  std::vector<char> out(1 << 20);
  size_t used = 0;
  archive* a = archive_write_new();
  archive_write_set_format_pax_restricted(a);
  archive_write_set_bytes_in_last_block(a, 1);
  archive_write_open_memory(a, out.data(), out.size(), &used);
  for (const auto& [path, bytes] : members) {
    archive_entry* e = archive_entry_new();
    archive_entry_set_pathname(e, path.c_str());
    archive_entry_set_size(e, static_cast<la_int64_t>(bytes.size()));
    archive_entry_set_filetype(e, AE_IFREG);
    archive_entry_set_perm(e, 0644);
    archive_write_header(a, e);
    archive_write_data(a, bytes.data(), bytes.size());
    archive_entry_free(e);
  }
  archive_write_close(a);
  archive_write_free(a);
  return std::string(out.data(), used);
}

std::string png_bytes(int w, int h, uint64_t seed) {
  const std::vector<uint8_t> px = noisy_pixels(w, h, 100, 150, 50, seed, 1, 40);
  const std::vector<uint8_t> b = data::encode_png_rgb(px.data(), h, w);
  return std::string(b.begin(), b.end());
}

std::vector<ddt::TarMember> members_of(const Names& paths) {
  std::vector<ddt::TarMember> m;
  for (const std::string& p : paths) m.push_back({p, 0, 1});
  return m;
}

// ROOT/train/<class>/NNN.{png,jpg}: n images per class of 3 classes, sizes varying.
void write_image_folder(const fs::path& root, int n) {
  for (int c = 0; c < 3; ++c) {
    const fs::path dir = root / "train" / ("c" + std::to_string(c));
    fs::create_directories(dir);
    for (int i = 0; i < n; ++i) {
      const int w = 20 + i, h = 16 + c;
      const auto px = noisy_pixels(w, h, 60 * c, 200 - 50 * c, 90, 10 * c + i, 5, 25);
      char name[16];
      std::snprintf(name, sizeof name, "%03d", i);
      if (i % 2)
        write_jpeg_file(dir / (std::string(name) + ".jpg"), w, h, px);
      else
        write_png_file(dir / (std::string(name) + ".png"), w, h, px);
    }
  }
}

// The two datasets hold the same targets and decoded pixels, item by item.
void expect_same_items(const data::Dataset& a, const data::Dataset& b) {
  ASSERT_EQ(a.size(), b.size());
  ASSERT_EQ(a.classes(), b.classes());
  ASSERT_EQ(a.target_kind(), b.target_kind());
  for (int64_t i = 0; i < a.size(); ++i) {
    const data::Example x = item(a, i), y = item(b, i);
    ASSERT_EQ(x.height, y.height) << i;
    ASSERT_EQ(x.width, y.width) << i;
    EXPECT_EQ(x.label, y.label) << i;
    EXPECT_EQ(0, std::memcmp(x.pixels, y.pixels, x.nbytes())) << i;
    ASSERT_EQ(x.num_boxes, y.num_boxes) << i;
    for (int64_t k = 0; k < x.num_boxes; ++k) {
      EXPECT_EQ(x.boxes[k].cls, y.boxes[k].cls);
      EXPECT_NEAR(x.boxes[k].x1, y.boxes[k].x1, 1e-4) << i << " " << k;
      EXPECT_NEAR(x.boxes[k].y1, y.boxes[k].y1, 1e-4);
      EXPECT_NEAR(x.boxes[k].x2, y.boxes[k].x2, 1e-4);
      EXPECT_NEAR(x.boxes[k].y2, y.boxes[k].y2, 1e-4);
    }
    if (x.mask) EXPECT_EQ(0, std::memcmp(x.mask, y.mask, x.height * x.width)) << i;
  }
}

RunResult shard(const TempDir& dir, const std::string& data, Names more = {},
                const std::string& out = "shards") {
  Names args = {"shard", "--data", data, "--out", out};
  args.insert(args.end(), more.begin(), more.end());
  return run_hpcnet(args, dir.path());
}

}  // namespace

TEST(Shards, BraceExpansion) {
  EXPECT_EQ(data::expand_braces("a-{000..002}.tar"),
            (Names{"a-000.tar", "a-001.tar", "a-002.tar"}));
  EXPECT_EQ(data::expand_braces("{8..10}"), (Names{"8", "9", "10"}));
  EXPECT_EQ(data::expand_braces("{08..10}"), (Names{"08", "09", "10"}));
  EXPECT_EQ(data::expand_braces("{3..1}"), (Names{"3", "2", "1"}));
  EXPECT_EQ(data::expand_braces("{0..6..3}"), (Names{"0", "3", "6"}));
  EXPECT_EQ(data::expand_braces("{a..c}"), (Names{"a", "b", "c"}));
  EXPECT_EQ(data::expand_braces("x{a,b}-{1..2}.tar"),
            (Names{"xa-1.tar", "xa-2.tar", "xb-1.tar", "xb-2.tar"}));
  EXPECT_EQ(data::expand_braces("{a,b{1,2}}"), (Names{"a", "b1", "b2"}));
  EXPECT_EQ(data::expand_braces("plain.tar"), (Names{"plain.tar"}));
  EXPECT_EQ(data::expand_braces("s/train-{000000..000146}.tar").size(), 147u);
  EXPECT_EQ(data::expand_braces("s/train-{000000..000146}.tar")[146], "s/train-000146.tar");
  for (const char* bad : {"a{1..3", "a}b", "a{}b", "{a}", "{1..}", "{0..99999999}", "{1..2}}"})
    EXPECT_TRUE(input_error([&] { data::expand_braces(bad); }, bad)) << bad;
}

TEST(Shards, KeysAsWebdataset) {
  std::string k, e;
  auto split = [&](const std::string& p) { return ddt::split_member_key(p, &k, &e); };
  ASSERT_TRUE(split("d/a.b.c"));
  EXPECT_EQ(k, "d/a");
  EXPECT_EQ(e, "b.c");
  ASSERT_TRUE(split("x.y/000.Mask.PNG"));
  EXPECT_EQ(k, "x.y/000");
  EXPECT_EQ(e, "Mask.PNG");
  ASSERT_TRUE(split("d/.x"));  // as the regex: the folder is the key
  EXPECT_EQ(k, "d/");
  EXPECT_EQ(e, "x");
  EXPECT_FALSE(split("d.e/.x"));
  EXPECT_FALSE(split("noext"));
  EXPECT_FALSE(split(".hidden"));
  EXPECT_TRUE(ddt::is_shard_metadata("__info__"));
  EXPECT_TRUE(ddt::is_shard_metadata("__meta__/a.json"));
  EXPECT_FALSE(ddt::is_shard_metadata("__a.jpg"));
}

TEST(Shards, GroupsConsecutiveMembersByKey) {
  const auto s =
      ddt::group_shard_members(members_of({"a.jpg", "a.cls", "__info__", "README", "b.PNG",
                                           "b.seg.png", "b.txt", "c.jpeg", "c.json", "a.png"}),
                               "s.tar");
  ASSERT_EQ(s.size(), 4u);  // a again after c is a new sample, as webdataset groups
  EXPECT_EQ(s[0].key, "a");
  EXPECT_EQ(s[0].image, 0);
  EXPECT_EQ(s[0].cls, 1);
  EXPECT_EQ(s[1].image, 4);
  EXPECT_EQ(s[1].mask, 5);
  EXPECT_EQ(s[1].txt, 6);
  EXPECT_EQ(s[2].json, 8);
  EXPECT_EQ(s[3].key, "a");
  EXPECT_TRUE(input_error(
      [] {
        ddt::group_shard_members(members_of({"k.cls", "k.jpg", "k.cls"}), "s.tar");
      },
      "webdataset: s.tar: key k: two members k.cls"));
  EXPECT_TRUE(input_error(
      [] {
        ddt::group_shard_members(members_of({"k.cls", "m.jpg"}), "s.tar");
      },
      "webdataset: s.tar: key k: no image"));
  EXPECT_TRUE(input_error(
      [] {
        ddt::group_shard_members(members_of({"k.webp", "k.cls"}), "s.tar");
      },
      "webp images are not supported; convert them to JPEG or PNG"));
  EXPECT_TRUE(input_error(
      [] {
        ddt::group_shard_members(members_of({"k.jpg", "k.png"}), "s.tar");
      },
      "key k: two images"));
  EXPECT_EQ(ddt::parse_shard_cls(" 12\n", "s.tar", "k"), 12);
  EXPECT_TRUE(input_error([] { ddt::parse_shard_cls("1.5", "s.tar", "k"); },
                          "webdataset: s.tar: key k: k.cls holds '1.5', not a class number"));
}

TEST(Shards, ImageFolderRoundTrip) {
  TempDir dir("shards_if");
  write_image_folder(dir / "imgs", 4);
  const RunResult r = shard(dir, "imgs");
  ASSERT_EQ(r.rc, 0) << r.err;
  EXPECT_NE(r.out.find("shards/train-000000.tar: 12 samples"), std::string::npos) << r.out;
  EXPECT_NE(r.out.find("--data 'shards/train-{000000..000000}.tar'"), std::string::npos) << r.out;
  const auto src = data::open_dataset("imagefolder", dir.str("imgs"), "train");
  for (const std::string& spec :
       {dir.str("shards/train-{000000..000000}.tar"), dir.str("shards")}) {
    ASSERT_TRUE(data::is_webdataset_path(spec)) << spec;
    const auto back = data::open_dataset("cifar10", spec, "train");  // recognised by its form
    expect_same_items(*src, *back);
    EXPECT_EQ(back->item_name(5), "train-000000.tar:000000005");
  }
  // The image members hold the source files' bytes.
  const auto tar = ddt::TarFile::open(dir.str("shards/train-000000.tar"));
  const ddt::TarMember* m = tar->find("000000001.jpg");
  ASSERT_NE(m, nullptr);
  const std::vector<uint8_t> bytes = tar->read(*m);
  EXPECT_EQ(std::string(bytes.begin(), bytes.end()), read_file(dir / "imgs/train/c0/001.jpg"));
  // Shuffled: the same samples in another order; old shards are never overwritten.
  expect_refused(shard(dir, "imgs"), "shards exist", {"already holds train-000000.tar"});
  const RunResult s = shard(dir, "imgs", {"--shuffle", "--seed", "3"}, "mixed");
  ASSERT_EQ(s.rc, 0) << s.err;
  EXPECT_EQ(data::load_webdataset(dir.str("mixed"))->size(), 12);
}

TEST(Shards, ShardSizeSplitsAndListFiles) {
  TempDir dir("shards_size");
  write_image_folder(dir / "imgs", 6);
  const RunResult r = shard(dir, "imgs", {"--shard-size", "12KB"});
  ASSERT_EQ(r.rc, 0) << r.err;
  std::vector<std::string> shards;
  for (const auto& e : fs::directory_iterator(dir / "shards"))
    if (e.path().extension() == ".tar") shards.push_back(e.path().filename().string());
  std::sort(shards.begin(), shards.end());
  ASSERT_GE(shards.size(), 3u) << r.out;
  std::string list;
  for (const std::string& s : shards) {
    EXPECT_LE(fs::file_size(dir / "shards" / s), 12'000u) << s;
    list += "shards/" + s + "\n";
  }
  write_file(dir / "list.txt", "# the shards\n" + list);
  const std::string n = std::to_string(shards.size() - 1);
  const std::string pattern =
      dir.str("shards/train-{000000..") + std::string(6 - n.size(), '0') + n + "}.tar";
  const auto src = data::open_dataset("imagefolder", dir.str("imgs"), "train");
  expect_same_items(*src, *data::open_dataset("webdataset", pattern, "train"));
  ASSERT_TRUE(data::is_webdataset_path(dir.str("list.txt")));
  expect_same_items(*src, *data::load_webdataset(dir.str("list.txt")));
  EXPECT_TRUE(input_error([&] { data::parse_byte_size("12 parsecs", "--shard-size"); },
                          "--shard-size 12 parsecs: expected a size"));
  EXPECT_EQ(data::parse_byte_size("1GB", "-"), 1'000'000'000u);
  EXPECT_EQ(data::parse_byte_size("64KiB", "-"), 65536u);
}

TEST(Shards, YoloRoundTrip) {
  TempDir dir("shards_yolo");
  write_tiny_detect(dir / "det", 6, 2);
  const RunResult r = shard(dir, "det");
  ASSERT_EQ(r.rc, 0) << r.err;
  const auto src = data::open_dataset("detect", dir.str("det"), "train");
  const auto back = data::load_webdataset(dir.str("shards"));
  ASSERT_EQ(back->target_kind(), data::TargetKind::kBoxes);
  expect_same_items(*src, *back);
}

TEST(Shards, SegmentationRoundTrip) {
  TempDir dir("shards_seg");
  const fs::path root = dir / "seg";
  fs::create_directories(root / "images/train");
  fs::create_directories(root / "masks/train");
  write_file(root / "classes.txt", "background\nthing\n");
  for (int i = 0; i < 3; ++i) {
    write_png_file(root / "images/train" / (std::to_string(i) + ".png"), 12, 10,
                   noisy_pixels(12, 10, 50, 60, 70, i, 2, 20));
    std::vector<uint8_t> mask(120);
    for (size_t p = 0; p < mask.size(); ++p) mask[p] = p % 7 == 0 ? 255 : (p + i) % 2;
    const auto png = data::encode_png_index(mask.data(), 10, 12, data::class_palette(256));
    write_file(root / "masks/train" / (std::to_string(i) + ".png"),
               std::string(png.begin(), png.end()));
  }
  const RunResult r = shard(dir, "seg");
  ASSERT_EQ(r.rc, 0) << r.err;
  const auto src = data::open_dataset("segmentation", root.string(), "train");
  const auto back = data::load_webdataset(dir.str("shards"));
  expect_same_items(*src, *back);
}

TEST(Shards, CorruptShardsNameShardAndKey) {
  TempDir dir("shards_bad");
  const std::string png = png_bytes(8, 8, 1);
  const std::string good =
      make_tar({{"k0.png", png}, {"k0.cls", "0"}, {"k1.png", png}, {"k1.cls", "1"}});
  write_file(dir / "cut.tar", good.substr(0, 512 + 512 + 100));  // inside k0.png's data
  std::string e = input_error([&] { data::load_webdataset(dir.str("cut.tar")); });
  EXPECT_NE(e.find("cut.tar"), std::string::npos) << e;
  EXPECT_NE(e.find("k0.png"), std::string::npos) << e;
  write_file(dir / "noimage.tar", make_tar({{"k0.png", png}, {"k0.cls", "0"}, {"k1.cls", "1"}}));
  EXPECT_TRUE(input_error([&] { data::load_webdataset(dir.str("noimage.tar")); },
                          "webdataset: " + dir.str("noimage.tar") + ": key k1: no image"));
  write_file(dir / "badcls.tar", make_tar({{"k0.png", png}, {"k0.cls", "cat"}}));
  EXPECT_TRUE(input_error([&] { data::load_webdataset(dir.str("badcls.tar")); },
                          "key k0: k0.cls holds 'cat'"));
  write_file(dir / "nocls.tar", make_tar({{"k0.png", png}, {"k0.cls", "0"}, {"k1.png", png}}));
  EXPECT_TRUE(
      input_error([&] { data::load_webdataset(dir.str("nocls.tar")); }, "key k1: no k1.cls"));
  EXPECT_TRUE(input_error([&] { data::load_webdataset(dir.str("s-{0..3}.tar")); },
                          "shard " + dir.str("s-0.tar") + " does not exist"));
  // The CLI: one line, exit 2.
  fs::create_directories(dir / "sh");
  fs::copy_file(dir / "noimage.tar", dir / "sh/train-000000.tar");
  const RunResult r = run_hpcnet(
      {"train", "--model", "lenet", "--data", "sh", "--epochs", "1", "--out", "run"}, dir.path());
  expect_refused(r, "key without image", {"train-000000.tar", "key k1", "no image"});
}

TEST(Shards, ReadsWebdatasetTarWriterFixture) {
  const std::string dir = std::string(HPCNET_SOURCE_DIR) + "/tests/fixtures/webdataset";
  const auto ds = data::load_webdataset(dir);
  ASSERT_EQ(ds->size(), 4);
  EXPECT_EQ(ds->classes(), (Names{"zero", "one", "two"}));
  ASSERT_EQ(ds->target_kind(), data::TargetKind::kLabel);  // every sample has a cls
  const int64_t labels[] = {0, 1, 2, 1};
  for (int64_t k = 0; k < 4; ++k) {
    EXPECT_EQ(ds->item_name(k), "wds-000000.tar:s00" + std::to_string(k));
    const data::Example ex = item(*ds, k);
    EXPECT_EQ(ex.label, labels[k]);
    ASSERT_EQ(ex.width, 8);
    ASSERT_EQ(ex.height, 6);
    int worst = 0;  // the formula of make_webdataset_fixture.py; the JPEG (k = 1) within 8
    for (int y = 0; y < 6; ++y)
      for (int x = 0; x < 8; ++x) {
        const int want[3] = {static_cast<int>((x * 31 + k * 50) % 256),
                             static_cast<int>((y * 40 + k * 20) % 256), static_cast<int>(90 + k)};
        for (int c = 0; c < 3; ++c)
          worst = std::max(worst, std::abs(ex.pixels[(y * 8 + x) * 3 + c] - want[c]));
      }
    EXPECT_LE(worst, k == 1 ? 8 : 0) << k;
  }
  // s003.txt: grouped with its sample, rows as written.
  const auto tar = ddt::TarFile::open(dir + "/wds-000000.tar");
  const auto samples = ddt::group_shard_members(tar->members(), "wds-000000.tar");
  ASSERT_EQ(samples.size(), 4u);
  ASSERT_GE(samples[3].txt, 0);
  const auto bytes = tar->read(tar->members()[static_cast<size_t>(samples[3].txt)]);
  const auto rows = ddt::parse_yolo_label(std::string(bytes.begin(), bytes.end()), "s003.txt", 2);
  ASSERT_EQ(rows.size(), 2u);
  EXPECT_DOUBLE_EQ(rows[1].x1, 0.0);
  EXPECT_DOUBLE_EQ(rows[1].y2, 1.0);
}

TEST(Shards, TrainsFromShards) {
  TempDir dir("shards_train");
  write_image_folder(dir / "imgs", 4);
  ASSERT_EQ(shard(dir, "imgs", {"--shard-size", "12KB"}).rc, 0);
  const RunResult r =
      run_hpcnet({"train", "--model", "lenet", "--data", "shards", "--imgsz", "32", "--epochs", "1",
                  "--batch-size", "4", "--out", "run", "--no-progress", "--threads", "1"},
                 dir.path());
  EXPECT_EQ(r.rc, 0) << r.err;
  EXPECT_NE(r.out.find("Finished Training"), std::string::npos) << r.out;
  // Streamed shard by shard through a shuffle buffer; an image folder has no shards to stream.
  const RunResult st = run_hpcnet({"train", "--model", "lenet", "--data", "shards", "--imgsz",
                                   "32", "--epochs", "1", "--batch-size", "4", "--out", "srun",
                                   "--no-progress", "--threads", "1", "--shuffle-buffer", "5"},
                                  dir.path());
  EXPECT_EQ(st.rc, 0) << st.err;
  const RunResult nf = run_hpcnet({"train", "--model", "lenet", "--dataset", "imagefolder",
                                   "--data", "imgs", "--imgsz", "32", "--epochs", "1", "--out",
                                   "frun", "--no-progress", "--shuffle-buffer", "5"},
                                  dir.path());
  EXPECT_EQ(nf.rc, 2);
  EXPECT_NE(nf.err.find("--shuffle-buffer streams WebDataset shards"), std::string::npos) << nf.err;
  // A detection model reads shards of YOLO rows too (its --dataset defaults to detect).
  write_tiny_detect(dir / "det", 6, 2);
  ASSERT_EQ(shard(dir, "det", {}, "dshards").rc, 0);
  const RunResult d = run_hpcnet({"train", "--model", "yolov8n", "--data", "dshards", "--imgsz",
                                  "64", "--epochs", "1", "--steps", "1", "--batch-size", "2",
                                  "--out", "drun", "--no-progress", "--threads", "1"},
                                 dir.path());
  EXPECT_EQ(d.rc, 0) << d.err;
  EXPECT_NE(d.out.find("Finished Training"), std::string::npos) << d.out;
}

// --shuffle-buffer: shards read in turn (shuffled per epoch, dealt to ranks), through a buffer.
TEST(Shards, ShuffleBufferStreamsShardsInTurn) {
  TempDir dir("shards_stream");
  const std::vector<int> sizes = {5, 6, 4, 5};  // 20 samples; starts 0, 5, 11, 15
  for (size_t k = 0; k < sizes.size(); ++k) {
    std::vector<std::pair<std::string, std::string>> members;
    for (int j = 0; j < sizes[k]; ++j) {
      const std::string key = "k" + std::to_string(k) + "_" + std::to_string(j);
      members.push_back({key + ".png", png_bytes(4, 4, 10 * k + static_cast<uint64_t>(j))});
      members.push_back({key + ".cls", std::to_string(k % 2) + "\n"});
    }
    write_file(dir / ("s-00000" + std::to_string(k) + ".tar"), make_tar(members));
  }
  const auto ds = data::load_webdataset(dir.str("s-{000000..000003}.tar"));
  ASSERT_EQ(ds->size(), 20);
  ASSERT_EQ(ds->shard_starts(), (std::vector<int64_t>{0, 5, 11, 15}));
  auto order = [&](bool shuffle, int64_t buffer, int64_t epoch, int rank = 0, int world = 1) {
    data::DataLoaderOptions o;
    o.batch_size = 4;
    o.shuffle = shuffle;
    o.shuffle_buffer = buffer;
    o.seed = 7;
    o.rank = rank;
    o.world_size = world;
    return data::DataLoader(ds, data::Compose(), o).epoch_order(epoch);
  };
  std::vector<int64_t> all(20);
  std::iota(all.begin(), all.end(), int64_t{0});
  EXPECT_EQ(order(false, 3, 0), all);  // in turn, no draws
  auto shard_of = [](int64_t i) { return i < 5 ? 0 : i < 11 ? 1 : i < 15 ? 2 : 3; };
  std::set<std::vector<int>> shard_orders;
  for (int64_t e = 0; e < 6; ++e) {
    // A buffer of one draws nothing: whole shards, each in order, in the epoch's shard order.
    const std::vector<int64_t> stream = order(true, 1, e);
    std::vector<int64_t> sorted = stream;
    std::sort(sorted.begin(), sorted.end());
    ASSERT_EQ(sorted, all);
    std::vector<int> shards;
    for (size_t p = 0; p < stream.size(); ++p) {
      if (p == 0 || shard_of(stream[p]) != shard_of(stream[p - 1]))
        shards.push_back(shard_of(stream[p]));
      else
        EXPECT_EQ(stream[p], stream[p - 1] + 1) << "epoch " << e;
    }
    EXPECT_EQ(shards.size(), 4u) << "each shard read once, in one piece";
    shard_orders.insert(shards);
    // A buffer of 3: a permutation of the epoch, each item drawn no later than 2 places after
    // the stream brought it in, and not the stream's own order.
    const std::vector<int64_t> drawn = order(true, 3, e);
    sorted = drawn;
    std::sort(sorted.begin(), sorted.end());
    ASSERT_EQ(sorted, all);
    std::vector<size_t> at(20);
    for (size_t j = 0; j < stream.size(); ++j) at[static_cast<size_t>(stream[j])] = j;
    for (size_t p = 0; p < drawn.size(); ++p) EXPECT_LT(at[static_cast<size_t>(drawn[p])], p + 3);
    EXPECT_NE(drawn, stream);
  }
  EXPECT_GT(shard_orders.size(), 1u) << "the shard order changes with the epoch";
  // Two ranks: whole shards each (0 and 2, 1 and 3 in turn), cut or repeated to 10 samples.
  EXPECT_EQ(order(false, 1, 0, 0, 2), (std::vector<int64_t>{0, 1, 2, 3, 4, 11, 12, 13, 14, 0}));
  EXPECT_EQ(order(false, 1, 0, 1, 2), (std::vector<int64_t>{5, 6, 7, 8, 9, 10, 15, 16, 17, 18}));
  for (int64_t e = 0; e < 3; ++e) {
    std::set<int> mine[2];
    for (int r = 0; r < 2; ++r)
      for (int64_t i : order(true, 4, e, r, 2)) mine[r].insert(shard_of(i));
    for (int k : mine[0]) EXPECT_EQ(mine[1].count(k), 0u) << "a shard read by both ranks";
    EXPECT_EQ(mine[0].size() + mine[1].size(), 4u);
  }
  // More ranks than shards: the stream's samples are dealt, 3 to each of 8 ranks.
  EXPECT_EQ(order(false, 1, 0, 3, 8), (std::vector<int64_t>{3, 11, 19}));
  EXPECT_EQ(order(false, 1, 0, 7, 8), (std::vector<int64_t>{7, 15, 7}));
  // Anything but shards is refused.
  write_image_folder(dir / "imgs", 2);
  data::DataLoaderOptions o;
  o.shuffle_buffer = 8;
  EXPECT_TRUE(input_error(
      [&] { data::DataLoader(data::open_dataset("imagefolder", dir.str("imgs"), "train"),
                             data::Compose(), o); },
      "--shuffle-buffer streams WebDataset shards"));
}

