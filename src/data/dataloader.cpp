// DataLoader: batches in a reproducible order, built in the calling thread or by worker threads
// that claim batch numbers in order and park finished batches in a ring of num_workers *
// prefetch_factor slots; next() hands them out strictly in order. A generation counter, bumped by
// begin_epoch() and on errors, makes workers drop batches of an abandoned epoch.
#include <condition_variable>
#include <exception>
#include <mutex>
#include <numeric>
#include <thread>

#include "hpcnet/data.h"
#include "hpcnet/rng.h"

namespace hpcnet::data {

struct DataLoader::Shared {
  struct Slot {
    int64_t batch = -1;  // batch number held, -1 when empty
    Batch value;
    std::exception_ptr error;
  };
  std::mutex mu;
  std::condition_variable work_cv;   // workers wait for claimable batches
  std::condition_variable ready_cv;  // next() waits for its batch
  int waiting_workers = 0;           // workers blocked on work_cv
  bool consumer_waiting = false;     // next() blocked on ready_cv
  bool stop = false;
  uint64_t generation = 0;
  int64_t epoch = 0;
  int64_t n_batches = 0;
  int64_t next_claim = 0;    // first batch no worker has taken
  int64_t next_deliver = 0;  // batch next() returns next
  std::shared_ptr<const std::vector<int64_t>> order;
  std::vector<Slot> slots;
  std::vector<std::thread> threads;
};

DataLoader::DataLoader(std::shared_ptr<const Dataset> dataset, Compose transform,
                       DataLoaderOptions options)
    : dataset_(std::move(dataset)), transform_(std::move(transform)), options_(options) {
  HPCNET_CHECK(dataset_ != nullptr, "DataLoader of a null dataset");
  HPCNET_REQUIRE(options_.batch_size > 0,
                 "DataLoader: batch_size must be > 0, got " + std::to_string(options_.batch_size));
  HPCNET_REQUIRE(
      options_.num_workers >= 0 && options_.num_workers <= 256,
      "DataLoader: num_workers must be in 0..256, got " + std::to_string(options_.num_workers));
  HPCNET_REQUIRE(options_.prefetch_factor > 0, "DataLoader: prefetch_factor must be > 0");
  HPCNET_REQUIRE(
      options_.world_size >= 1 && options_.rank >= 0 && options_.rank < options_.world_size,
      "DataLoader: rank " + std::to_string(options_.rank) + " of world_size " +
          std::to_string(options_.world_size) + " (need 0 <= rank < world_size)");
  HPCNET_REQUIRE(options_.shuffle_buffer >= 0, "DataLoader: shuffle_buffer must be >= 0");
  if (options_.shuffle_buffer > 0) {
    shard_starts_ = dataset_->shard_starts();
    HPCNET_REQUIRE(!shard_starts_.empty(),
                   "--shuffle-buffer streams WebDataset shards, and " + dataset_->describe() +
                       " is not read from shards; drop --shuffle-buffer (or write shards with "
                       "hpcnet shard)");
  }
  if (options_.num_workers > 0) {
    shared_ = std::make_unique<Shared>();
    shared_->slots.resize(static_cast<size_t>(options_.num_workers * options_.prefetch_factor));
    for (int i = 0; i < options_.num_workers; ++i)
      shared_->threads.emplace_back([this] { worker_loop(); });
  }
}

DataLoader::~DataLoader() {
  if (!shared_) return;
  {
    std::lock_guard<std::mutex> lock(shared_->mu);
    shared_->stop = true;
  }
  shared_->work_cv.notify_all();
  for (std::thread& t : shared_->threads) t.join();
}

int64_t DataLoader::samples_per_epoch() const {
  const int64_t w = options_.world_size;
  return (dataset_->size() + w - 1) / w;
}

int64_t DataLoader::num_batches() const {
  const int64_t n = samples_per_epoch(), b = options_.batch_size;
  return options_.drop_last ? n / b : (n + b - 1) / b;
}

namespace {

// The shards streamed through a shuffle buffer (DataLoaderOptions::shuffle_buffer).
std::vector<int64_t> stream_order(const std::vector<int64_t>& starts, int64_t n,
                                  const DataLoaderOptions& o, int64_t epoch, int64_t share) {
  const int64_t shards = static_cast<int64_t>(starts.size());
  std::vector<int64_t> shard_order(static_cast<size_t>(shards));
  if (o.shuffle) {
    Rng rng(o.seed, 2000 + static_cast<uint64_t>(epoch));
    shard_order = random_permutation(shards, rng);
  } else {
    std::iota(shard_order.begin(), shard_order.end(), int64_t{0});
  }
  auto append_shard = [&](int64_t k, std::vector<int64_t>& out) {
    const int64_t end = k + 1 < shards ? starts[static_cast<size_t>(k + 1)] : n;
    for (int64_t i = starts[static_cast<size_t>(k)]; i < end; ++i) out.push_back(i);
  };
  const int64_t w = o.world_size;
  std::vector<int64_t> stream;
  if (shards >= w) {  // whole shards to each rank
    for (int64_t j = o.rank; j < shards; j += w) append_shard(shard_order[static_cast<size_t>(j)], stream);
  }
  if (stream.empty()) {  // fewer shards than ranks (or empty ones): deal the items
    std::vector<int64_t> all;
    for (int64_t k : shard_order) append_shard(k, all);
    for (size_t j = static_cast<size_t>(o.rank); j < all.size(); j += static_cast<size_t>(w))
      stream.push_back(all[j]);
  }
  if (stream.empty()) return {};
  // Every rank takes share items: cut, or repeated from the start (DistributedSampler's padding).
  const size_t got = stream.size();
  stream.resize(static_cast<size_t>(share));
  for (size_t j = got; j < stream.size(); ++j) stream[j] = stream[j % got];
  if (!o.shuffle) return stream;
  // webdataset's shuffle buffer: fill it, then each next item is a random one of the buffer,
  // replaced by the next of the stream; at the end the buffer drains in random order.
  Rng rng(o.seed, 3000 + static_cast<uint64_t>(epoch) * 4096 + static_cast<uint64_t>(o.rank));
  const size_t cap = static_cast<size_t>(std::max<int64_t>(1, o.shuffle_buffer));
  std::vector<int64_t> buffer, out;
  buffer.reserve(std::min(cap, stream.size()));
  out.reserve(stream.size());
  for (int64_t i : stream) {
    if (buffer.size() < cap) {
      buffer.push_back(i);
      continue;
    }
    const size_t k = static_cast<size_t>(rng.randint(buffer.size()));
    out.push_back(buffer[k]);
    buffer[k] = i;
  }
  while (!buffer.empty()) {
    const size_t k = static_cast<size_t>(rng.randint(buffer.size()));
    out.push_back(buffer[k]);
    buffer[k] = buffer.back();
    buffer.pop_back();
  }
  return out;
}

}  // namespace

std::vector<int64_t> DataLoader::epoch_order(int64_t epoch) const {
  const int64_t n = dataset_->size();
  if (options_.shuffle_buffer > 0 && n > 0)
    return stream_order(shard_starts_, n, options_, epoch, samples_per_epoch());
  std::vector<int64_t> order;
  if (options_.shuffle) {
    Rng rng(options_.seed, 1000 + static_cast<uint64_t>(epoch));
    order = random_permutation(n, rng);
  } else {
    order.resize(static_cast<size_t>(n));
    std::iota(order.begin(), order.end(), int64_t{0});
  }
  const int64_t w = options_.world_size;
  if (w == 1 || n == 0) return order;
  // DistributedSampler: pad cyclically to w * share, then take every w-th from position rank.
  const int64_t share = samples_per_epoch();
  std::vector<int64_t> mine(static_cast<size_t>(share));
  for (int64_t j = 0; j < share; ++j)
    mine[static_cast<size_t>(j)] = order[static_cast<size_t>((options_.rank + j * w) % n)];
  return mine;
}

void DataLoader::build_batch(const std::vector<int64_t>& order, int64_t epoch, int64_t b,
                             Batch& out) const {
  const int64_t n = static_cast<int64_t>(order.size());
  const int64_t start = b * options_.batch_size;
  const int64_t count = std::min(options_.batch_size, n - start);
  HPCNET_CHECK(count > 0, "batch index past the end of the epoch");
  out.size = count;
  out.index = b;
  out.indices.assign(order.begin() + start, order.begin() + start + count);
  out.sizes.resize(static_cast<size_t>(count));
  const TargetKind kind = dataset_->target_kind();
  out.boxes.assign(kind == TargetKind::kBoxes ? static_cast<size_t>(count) : 0, {});
  std::array<int64_t, 3> shape{};
  int64_t sample = 0, first_height = 0, first_width = 0;
  float* images = nullptr;    // (B, 3, H, W)
  int64_t* labels = nullptr;  // (B,)
  int64_t* masks = nullptr;   // (B, H, W)
  // One buffer per thread: a lazy dataset decodes each image into it, and the transforms read it
  // before the next image is decoded.
  thread_local ExampleBuffer buffer;
  for (int64_t i = 0; i < count; ++i) {
    const int64_t idx = out.indices[static_cast<size_t>(i)];
    const Example ex = dataset_->get(idx, buffer);
    if (i == 0) {  // the batch's shape is the first image's output shape
      first_height = ex.height, first_width = ex.width;
      shape = transform_.output_shape(ex.height, ex.width);
      sample = shape[0] * shape[1] * shape[2];
      out.images = Tensor::empty({count, shape[0], shape[1], shape[2]}, DType::kFloat32);
      out.labels = Tensor::empty({count}, DType::kInt64);
      images = out.images.data<float>();
      labels = out.labels.data<int64_t>();
      out.masks = kind == TargetKind::kMask
                      ? Tensor::empty({count, shape[1], shape[2]}, DType::kInt64)
                      : Tensor();
      if (kind == TargetKind::kMask) masks = out.masks.data<int64_t>();
    } else if ((ex.height != first_height || ex.width != first_width) &&
               transform_.output_shape(ex.height, ex.width) != shape) {
      // Images of several sizes may share a batch when the transforms bring them to one size
      // (a Resize or Letterbox first, or crops of one size).
      throw InputError("DataLoader: image " + dataset_->item_name(idx) + " is " +
                       std::to_string(ex.height) + "x" + std::to_string(ex.width) + " but " +
                       dataset_->item_name(out.indices[0]) + " in the same batch is " +
                       std::to_string(first_height) + "x" + std::to_string(first_width) +
                       "; resize the images to one size, add a RandomCrop, or use batch_size 1");
    }
    const uint64_t seed =
        mix_seed(options_.seed, static_cast<uint64_t>(epoch), static_cast<uint64_t>(idx));
    std::vector<Box>* bx = kind == TargetKind::kBoxes ? &out.boxes[static_cast<size_t>(i)] : nullptr;
    int64_t* mk = masks ? masks + i * shape[1] * shape[2] : nullptr;
    if (transform_.needs_dataset())
      transform_.apply(*dataset_, idx, ex, seed, images + i * sample, bx, mk);
    else
      transform_.apply(ex, seed, images + i * sample, bx, mk);
    labels[i] = ex.label;
    out.sizes[static_cast<size_t>(i)] = {ex.height, ex.width};
  }
}

void DataLoader::begin_epoch(int64_t epoch, int64_t first_batch) {
  HPCNET_REQUIRE(first_batch >= 0 && first_batch <= num_batches(),
                 "DataLoader: first batch " + std::to_string(first_batch) + " of an epoch of " +
                     std::to_string(num_batches()));
  started_ = true;
  auto order = std::make_shared<const std::vector<int64_t>>(epoch_order(epoch));
  if (!shared_) {
    epoch_ = epoch;
    next_batch_ = first_batch;
    order_ = std::move(order);
    return;
  }
  {
    std::lock_guard<std::mutex> lock(shared_->mu);
    shared_->generation++;
    shared_->epoch = epoch;
    shared_->n_batches = num_batches();
    shared_->next_claim = first_batch;
    shared_->next_deliver = first_batch;
    shared_->order = std::move(order);
    for (Shared::Slot& s : shared_->slots) s = Shared::Slot{};
  }
  shared_->work_cv.notify_all();
}

bool DataLoader::next(Batch& out) {
  if (!started_) begin_epoch(0);
  if (!shared_) {
    if (next_batch_ >= num_batches()) return false;
    const int64_t b = next_batch_++;
    build_batch(*order_, epoch_, b, out);
    return true;
  }
  Shared& s = *shared_;
  std::unique_lock<std::mutex> lock(s.mu);
  if (s.next_deliver >= s.n_batches) return false;
  const int64_t b = s.next_deliver;
  Shared::Slot& slot = s.slots[static_cast<size_t>(b) % s.slots.size()];
  if (slot.batch != b) {
    s.consumer_waiting = true;
    s.ready_cv.wait(lock, [&] { return slot.batch == b; });
    s.consumer_waiting = false;
  }
  std::exception_ptr error = std::move(slot.error);
  if (!error) out = std::move(slot.value);
  slot = Shared::Slot{};
  s.next_deliver++;
  if (error) {
    // The epoch ends here: drop the work in flight.
    s.generation++;
    s.next_deliver = s.n_batches;
    s.next_claim = s.n_batches;
    for (Shared::Slot& other : s.slots) other = Shared::Slot{};
  }
  // Wake idle workers only once half the ring is free, so each wake-up (a futex call and a
  // context switch, tens of microseconds) buys several batches rather than one.
  const int64_t free_slots =
      static_cast<int64_t>(s.slots.size()) - (s.next_claim - s.next_deliver);
  const bool wake = s.waiting_workers > 0 &&
                    (error || free_slots >= std::max<int64_t>(1, static_cast<int64_t>(s.slots.size()) / 2) ||
                     s.next_claim <= s.next_deliver);
  lock.unlock();
  if (wake) s.work_cv.notify_all();
  if (error) std::rethrow_exception(error);
  return true;
}

void DataLoader::worker_loop() {
  Shared& s = *shared_;
  std::unique_lock<std::mutex> lock(s.mu);
  for (;;) {
    auto can_work = [&] {
      return s.stop || (s.next_claim < s.n_batches &&
                        s.next_claim < s.next_deliver + static_cast<int64_t>(s.slots.size()));
    };
    if (!can_work()) {
      s.waiting_workers++;
      s.work_cv.wait(lock, can_work);
      s.waiting_workers--;
    }
    if (s.stop) return;
    const int64_t b = s.next_claim++;
    const uint64_t generation = s.generation;
    const int64_t epoch = s.epoch;
    std::shared_ptr<const std::vector<int64_t>> order = s.order;
    lock.unlock();
    Batch batch;
    std::exception_ptr error;
    try {
      build_batch(*order, epoch, b, batch);
    } catch (...) {
      error = std::current_exception();
    }
    lock.lock();
    if (generation != s.generation) continue;  // the epoch was abandoned
    Shared::Slot& slot = s.slots[static_cast<size_t>(b) % s.slots.size()];
    slot.batch = b;
    slot.value = std::move(batch);
    slot.error = std::move(error);
    if (s.consumer_waiting) s.ready_cv.notify_all();
  }
}

}  // namespace hpcnet::data
