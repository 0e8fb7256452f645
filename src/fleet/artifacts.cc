// FleetArtifactStore: content-addressed, chunked, verified artifacts and the
// compile lease (gearbox/fleet_artifacts.h, docs/FLEET.md "Shared artifacts").
#include <charconv>
#include <utility>
#include <vector>

#include "gearbox/fleet_artifacts.h"
#include "src/common/errors.h"
#include "src/common/mutex.h"

namespace gearbox {

using internal::Cat;

namespace {

constexpr std::string_view kManifestMagic = "gearbox-artifact 1";
constexpr size_t kMaxManifestBytes = 1024;

absl::StatusOr<int64_t> ManifestNumber(std::string_view text, std::string_view field, int64_t lo,
                                       int64_t hi) {
  int64_t v = 0;
  auto [ptr, ec] = std::from_chars(text.data(), text.data() + text.size(), v);
  // Canonical decimals only: no sign, no leading zero (except "0").
  const bool canonical =
      !text.empty() && text[0] >= '0' && text[0] <= '9' && (text.size() == 1 || text[0] != '0');
  if (!canonical || ec != std::errc() || ptr != text.data() + text.size() || v < lo || v > hi) {
    return absl::DataLossError(Cat("fleet artifact manifest: ", field, " \"", text.substr(0, 32),
                                   "\" is not allowed; a decimal in [", lo, ", ", hi, "]"));
  }
  return v;
}

}  // namespace

absl::Status ValidateFleetArtifactKind(std::string_view kind) {
  bool ok = !kind.empty() && kind.size() <= 64;
  for (char c : kind) {
    ok = ok &&
         ((c >= 'a' && c <= 'z') || (c >= '0' && c <= '9') || c == '_' || c == '.' || c == '-');
  }
  if (!ok) {
    return internal::InvalidField("artifact kind", Cat("\"", kind.substr(0, 64), "\""),
                                  "1..64 characters of [a-z0-9_.-]");
  }
  return absl::OkStatus();
}

absl::Status ValidateFleetGearKey(std::string_view gear_key) {
  bool ok = !gear_key.empty() && gear_key.size() <= 256;
  for (char c : gear_key) ok = ok && c > 0x20 && c < 0x7f;
  if (!ok) {
    return internal::InvalidField("artifact gear key",
                                  Cat(gear_key.size(), " bytes: \"", gear_key.substr(0, 64), "\""),
                                  "1..256 printable ASCII characters without spaces");
  }
  return absl::OkStatus();
}

absl::Status CheckFleetDigest(std::string_view text) {
  bool ok = text.size() == 64;
  for (char c : text) ok = ok && ((c >= '0' && c <= '9') || (c >= 'a' && c <= 'f'));
  if (!ok) {
    return absl::DataLossError(Cat("fleet artifact index: a ", text.size(),
                                   "-byte value is not allowed; 64 lowercase hex digits"));
  }
  return absl::OkStatus();
}

std::string EncodeFleetArtifactManifest(const FleetArtifactManifest& m) {
  return Cat(kManifestMagic, "\nkind ", m.kind, "\nsize ", m.size, "\nchunk ", m.chunk_bytes, "\n");
}

absl::StatusOr<FleetArtifactManifest> DecodeFleetArtifactManifest(std::string_view text) {
  if (text.size() > kMaxManifestBytes) {
    return absl::DataLossError(Cat("fleet artifact manifest: ", text.size(),
                                   " bytes is not allowed; at most ", kMaxManifestBytes));
  }
  std::vector<std::string_view> lines;
  size_t start = 0;
  while (start < text.size()) {
    const size_t end = text.find('\n', start);
    if (end == std::string_view::npos) {
      return absl::DataLossError("fleet artifact manifest: the last line has no newline");
    }
    lines.push_back(text.substr(start, end - start));
    start = end + 1;
  }
  if (lines.size() != 4 || lines[0] != kManifestMagic) {
    return absl::DataLossError(Cat("fleet artifact manifest: not \"", kManifestMagic,
                                   "\" followed by the kind, size and chunk lines"));
  }
  auto field = [&](size_t i, std::string_view name) -> absl::StatusOr<std::string_view> {
    const std::string_view line = lines[i];
    if (line.size() <= name.size() + 1 || line.substr(0, name.size()) != name ||
        line[name.size()] != ' ') {
      return absl::DataLossError(
          Cat("fleet artifact manifest: line ", i + 1, " is not \"", name, " <value>\""));
    }
    return line.substr(name.size() + 1);
  };
  FleetArtifactManifest m;
  auto kind = field(1, "kind");
  if (!kind.ok()) return kind.status();
  if (auto s = ValidateFleetArtifactKind(*kind); !s.ok()) {
    return absl::DataLossError(Cat("fleet artifact manifest: ", internal::Message(s)));
  }
  m.kind = std::string(*kind);
  auto size_text = field(2, "size");
  if (!size_text.ok()) return size_text.status();
  auto size = ManifestNumber(*size_text, "size", 0, kFleetMaxArtifactBytes);
  if (!size.ok()) return size.status();
  auto chunk_text = field(3, "chunk");
  if (!chunk_text.ok()) return chunk_text.status();
  auto chunk = ManifestNumber(*chunk_text, "chunk", 1, kFleetMaxChunkBytes);
  if (!chunk.ok()) return chunk.status();
  m.size = *size;
  m.chunk_bytes = *chunk;
  const int64_t chunks = (m.size + m.chunk_bytes - 1) / m.chunk_bytes;
  if (chunks > kFleetMaxChunks) {
    return absl::DataLossError(Cat("fleet artifact manifest: ", chunks,
                                   " chunks is not allowed; at most ", kFleetMaxChunks));
  }
  m.chunks = static_cast<int>(chunks);
  return m;
}

absl::Status ValidateFleetArtifactOptions(const FleetArtifactOptions& o) {
  if (o.replica_id.empty() || o.replica_id.size() > 256) {
    return internal::InvalidField("artifacts.replica_id", Cat(o.replica_id.size(), " characters"),
                                  "1..256 characters (unique per replica)");
  }
  if (o.chunk_bytes < 1024 || o.chunk_bytes > kFleetMaxChunkBytes) {
    return internal::InvalidFieldValue("artifacts.chunk_bytes", o.chunk_bytes,
                                       Cat("bytes in [1024, ", kFleetMaxChunkBytes, "]"));
  }
  if (o.max_chunks < 1 || o.max_chunks > kFleetMaxChunks) {
    return internal::InvalidFieldValue("artifacts.max_chunks", o.max_chunks,
                                       Cat("an integer in [1, ", kFleetMaxChunks, "]"));
  }
  constexpr int64_t kYearMs = int64_t{365} * 24 * 3600 * 1000;
  if (o.ttl_ms < 1 || o.ttl_ms > kYearMs) {
    return internal::InvalidFieldValue("artifacts.ttl_ms", o.ttl_ms,
                                       "milliseconds in [1, one year]");
  }
  if (o.lease_ms < 1 || o.lease_ms > 3600000) {
    return internal::InvalidFieldValue("artifacts.lease_ms", o.lease_ms,
                                       "milliseconds in [1, 3600000]");
  }
  if (o.wait_ms < 0 || o.wait_ms > 3600000) {
    return internal::InvalidFieldValue("artifacts.wait_ms", o.wait_ms,
                                       "milliseconds in [0, 3600000] (0: never wait)");
  }
  if (o.wait_ms > 0 && (o.poll_ms < 1 || o.poll_ms > o.wait_ms)) {
    return internal::InvalidFieldValue("artifacts.poll_ms", o.poll_ms,
                                       Cat("milliseconds in [1, wait_ms = ", o.wait_ms, "]"));
  }
  if (o.chunks_per_read < 1 || o.chunks_per_read > 1024) {
    return internal::InvalidFieldValue("artifacts.chunks_per_read", o.chunks_per_read,
                                       "an integer in [1, 1024]");
  }
  return absl::OkStatus();
}

// Thread-safety: the store serializes its own calls; `mu` guards only the
// counters (never held across a store call or a build).
class FleetArtifactStore::Impl {
 public:
  Impl(FleetStore* s, std::string p, FleetArtifactOptions o, LogSink l)
      : store(s),
        prefix(std::move(p)),
        options(std::move(o)),
        clock(options.clock != nullptr ? options.clock : SystemClock::Default()),
        log(std::move(l)) {}

  FleetStore* const store;
  const std::string prefix;
  const FleetArtifactOptions options;
  Clock* const clock;
  const LogSink log;
  mutable Mutex mu;
  FleetArtifactCounters counters ABSL_GUARDED_BY(mu);

  void Log(LogLevel level, std::string_view message) const {
    if (log) {
      log(level, message);
    } else {
      StderrLogSink(level, message);
    }
  }
  template <typename F>
  void Count(F&& f) {
    MutexLock lock(&mu);
    f(counters);
  }

  std::string IndexKey(std::string_view kind, std::string_view gear) const {
    return Cat(prefix, ":art:idx:", kind, ":", gear);
  }
  std::string ManifestKey(std::string_view digest) const {
    return Cat(prefix, ":art:", digest, ":m");
  }
  std::string ChunkKey(std::string_view digest, int i) const {
    return Cat(prefix, ":art:", digest, ":c", i);
  }
  std::string LeaseKey(std::string_view kind, std::string_view gear) const {
    return Cat(prefix, ":art:lease:", kind, ":", gear);
  }

  // A rejected read: a miss, logged with the key (never the bytes).
  std::optional<FleetArtifact> Corrupt(std::string_view key, std::string_view why) {
    Count([](FleetArtifactCounters& c) {
      ++c.corrupt;
      ++c.misses;
    });
    Log(LogLevel::kError,
        Cat("fleet artifact at \"", key, "\" rejected (", why, "); treated as a miss"));
    return std::nullopt;
  }
  absl::Status StoreFailed(const absl::Status& s) {
    Count([](FleetArtifactCounters& c) { ++c.store_failures; });
    return s;
  }
};

absl::StatusOr<std::unique_ptr<FleetArtifactStore>> FleetArtifactStore::Create(
    FleetStore* store, const FleetFingerprint& fingerprint, FleetArtifactOptions options,
    LogSink log) {
  if (store == nullptr) {
    return absl::InvalidArgumentError("artifacts: a store is required");
  }
  if (auto s = ValidateFleetFingerprint(fingerprint); !s.ok()) return s;
  if (auto s = ValidateFleetArtifactOptions(options); !s.ok()) return s;
  return std::unique_ptr<FleetArtifactStore>(new FleetArtifactStore(std::make_unique<Impl>(
      store, FleetKeyPrefix(fingerprint), std::move(options), std::move(log))));
}

FleetArtifactStore::FleetArtifactStore(std::unique_ptr<Impl> impl) : impl_(std::move(impl)) {}
FleetArtifactStore::~FleetArtifactStore() = default;

const std::string& FleetArtifactStore::prefix() const { return impl_->prefix; }

FleetArtifactCounters FleetArtifactStore::counters() const {
  MutexLock lock(&impl_->mu);
  return impl_->counters;
}

absl::StatusOr<std::string> FleetArtifactStore::Put(std::string_view gear_key,
                                                    std::string_view kind, std::string_view bytes) {
  if (auto s = ValidateFleetGearKey(gear_key); !s.ok()) return s;
  if (auto s = ValidateFleetArtifactKind(kind); !s.ok()) return s;
  const FleetArtifactOptions& o = impl_->options;
  const int64_t size = static_cast<int64_t>(bytes.size());
  const int64_t chunks = (size + o.chunk_bytes - 1) / o.chunk_bytes;
  if (chunks > o.max_chunks) {
    impl_->Count([](FleetArtifactCounters& c) { ++c.too_large; });
    return internal::InvalidFieldValue("artifact size", size,
                                       Cat("at most artifacts.max_chunks x chunk_bytes = ",
                                           o.max_chunks * o.chunk_bytes, " bytes"));
  }
  const std::string digest = FleetSha256Hex(bytes);
  std::vector<std::pair<std::string, std::string>> entries;
  entries.reserve(static_cast<size_t>(chunks) + 2);
  for (int64_t i = 0; i < chunks; ++i) {
    const size_t from = static_cast<size_t>(i * o.chunk_bytes);
    entries.emplace_back(impl_->ChunkKey(digest, static_cast<int>(i)),
                         std::string(bytes.substr(from, static_cast<size_t>(o.chunk_bytes))));
  }
  FleetArtifactManifest m;
  m.kind = std::string(kind);
  m.size = size;
  m.chunk_bytes = o.chunk_bytes;
  entries.emplace_back(impl_->ManifestKey(digest), EncodeFleetArtifactManifest(m));
  // Last: a reader that finds the index finds the content (ordered writes).
  entries.emplace_back(impl_->IndexKey(kind, gear_key), digest);
  if (auto s = impl_->store->PutStrings(entries, o.ttl_ms); !s.ok()) return impl_->StoreFailed(s);
  impl_->Count([size](FleetArtifactCounters& c) {
    ++c.puts;
    c.bytes_put += static_cast<uint64_t>(size);
  });
  return digest;
}

absl::StatusOr<std::optional<FleetArtifact>> FleetArtifactStore::Get(std::string_view gear_key,
                                                                     std::string_view kind) {
  if (auto s = ValidateFleetGearKey(gear_key); !s.ok()) return s;
  if (auto s = ValidateFleetArtifactKind(kind); !s.ok()) return s;
  const std::string index_key = impl_->IndexKey(kind, gear_key);
  auto miss = [this]() -> std::optional<FleetArtifact> {
    impl_->Count([](FleetArtifactCounters& c) { ++c.misses; });
    return std::nullopt;
  };
  auto index = impl_->store->GetStrings(std::span<const std::string>(&index_key, 1));
  if (!index.ok()) {
    if (index.status().code() == absl::StatusCode::kDataLoss) {
      return impl_->Corrupt(index_key, internal::Message(index.status()));
    }
    return impl_->StoreFailed(index.status());
  }
  if (!(*index)[0].has_value()) return miss();
  const std::string digest = *(*index)[0];
  if (auto s = CheckFleetDigest(digest); !s.ok())
    return impl_->Corrupt(index_key, internal::Message(s));
  const std::string manifest_key = impl_->ManifestKey(digest);
  auto manifest_text = impl_->store->GetStrings(std::span<const std::string>(&manifest_key, 1));
  if (!manifest_text.ok()) {
    if (manifest_text.status().code() == absl::StatusCode::kDataLoss) {
      return impl_->Corrupt(manifest_key, internal::Message(manifest_text.status()));
    }
    return impl_->StoreFailed(manifest_text.status());
  }
  if (!(*manifest_text)[0].has_value()) return miss();  // expired before its index
  auto manifest = DecodeFleetArtifactManifest(*(*manifest_text)[0]);
  if (!manifest.ok()) return impl_->Corrupt(manifest_key, internal::Message(manifest.status()));
  if (manifest->kind != kind) {
    return impl_->Corrupt(manifest_key,
                          Cat("kind \"", manifest->kind, "\", expected \"", kind, "\""));
  }
  if (manifest->chunks > impl_->options.max_chunks) {
    return impl_->Corrupt(manifest_key, Cat(manifest->chunks, " chunks, at most ",
                                            impl_->options.max_chunks, " allowed"));
  }
  std::string bytes;
  bytes.reserve(static_cast<size_t>(manifest->size));
  const int per_read = impl_->options.chunks_per_read;
  for (int first = 0; first < manifest->chunks; first += per_read) {
    std::vector<std::string> keys;
    for (int i = first; i < std::min(manifest->chunks, first + per_read); ++i) {
      keys.push_back(impl_->ChunkKey(digest, i));
    }
    auto values = impl_->store->GetStrings(keys);
    if (!values.ok()) {
      if (values.status().code() == absl::StatusCode::kDataLoss) {
        return impl_->Corrupt(manifest_key, internal::Message(values.status()));
      }
      return impl_->StoreFailed(values.status());
    }
    for (size_t k = 0; k < keys.size(); ++k) {
      const int i = first + static_cast<int>(k);
      const int64_t expected =
          std::min(manifest->chunk_bytes, manifest->size - int64_t{i} * manifest->chunk_bytes);
      const std::optional<std::string>& chunk = (*values)[k];
      if (!chunk.has_value()) {
        return impl_->Corrupt(keys[k], "chunk missing (expired or evicted)");
      }
      if (static_cast<int64_t>(chunk->size()) != expected) {
        return impl_->Corrupt(keys[k],
                              Cat("chunk of ", chunk->size(), " bytes, expected ", expected));
      }
      bytes += *chunk;
    }
  }
  if (FleetSha256Hex(bytes) != digest) {
    return impl_->Corrupt(manifest_key, "SHA-256 of the content differs from its digest");
  }
  impl_->Count([&bytes](FleetArtifactCounters& c) {
    ++c.loads;
    c.bytes_loaded += bytes.size();
  });
  return FleetArtifact{std::string(kind), digest, std::move(bytes)};
}

absl::StatusOr<ObtainedArtifact> FleetArtifactStore::Obtain(
    std::string_view gear_key, std::string_view kind,
    const std::function<absl::StatusOr<std::string>()>& build) {
  if (auto s = ValidateFleetGearKey(gear_key); !s.ok()) return s;
  if (auto s = ValidateFleetArtifactKind(kind); !s.ok()) return s;
  const FleetArtifactOptions& o = impl_->options;
  const std::string lease = impl_->LeaseKey(kind, gear_key);
  ObtainedArtifact out;
  // Builds here; puts it when the store allows (a failed put is only counted:
  // the artifact is still good locally).
  auto build_here = [&](bool holds_lease) -> absl::StatusOr<ObtainedArtifact> {
    absl::StatusOr<std::string> bytes = build();
    // Released after the put (below) or the failure, so a waiter that takes
    // the lease next finds the artifact first.
    auto release = [&] {
      if (holds_lease) (void)impl_->store->ReleaseLease(lease, o.replica_id);
    };
    if (!bytes.ok()) {
      release();
      return bytes.status();
    }
    impl_->Count([&out](FleetArtifactCounters& c) {
      ++c.builds;
      if (out.waited) ++c.builds_after_wait;
    });
    out.source = ArtifactSource::kBuilt;
    out.artifact.kind = std::string(kind);
    out.artifact.digest = FleetSha256Hex(*bytes);
    out.artifact.bytes = *std::move(bytes);
    // Put even without the lease (the store was down a moment ago, the wait
    // ran out): the same bytes give the same digest, so a second put is
    // harmless; a failure is counted in Put and the artifact still serves here.
    (void)Put(gear_key, kind, out.artifact.bytes);
    release();
    return out;
  };
  auto loaded = [&](FleetArtifact a) {
    out.source = ArtifactSource::kLoaded;
    out.artifact = std::move(a);
    return out;
  };

  auto found = Get(gear_key, kind);
  if (!found.ok()) return build_here(false);  // the store down: never wait on it
  if (found->has_value()) return loaded(**found);
  auto held = impl_->store->AcquireLease(lease, o.replica_id, o.lease_ms);
  if (!held.ok()) {
    impl_->StoreFailed(held.status()).IgnoreError();
    return build_here(false);
  }
  // Double-checked: a holder may have put the artifact and released the
  // lease between our miss and our lease.
  auto recheck = [&]() -> std::optional<absl::StatusOr<ObtainedArtifact>> {
    auto again = Get(gear_key, kind);
    if (again.ok() && again->has_value()) {
      (void)impl_->store->ReleaseLease(lease, o.replica_id);
      return loaded(**again);
    }
    return std::nullopt;
  };
  if (*held) {
    if (auto r = recheck()) return *std::move(r);
    return build_here(true);
  }
  out.waited = true;
  impl_->Count([](FleetArtifactCounters& c) { ++c.lease_waits; });
  WakeSignal wake;  // this call's own (the clocks need one); nobody notifies it
  const double deadline = impl_->clock->NowSeconds() + static_cast<double>(o.wait_ms) / 1000.0;
  while (impl_->clock->NowSeconds() < deadline) {
    const double next =
        std::min(deadline, impl_->clock->NowSeconds() + static_cast<double>(o.poll_ms) / 1000.0);
    impl_->clock->SleepUntil(next, &wake);
    found = Get(gear_key, kind);
    if (!found.ok()) return build_here(false);
    if (found->has_value()) return loaded(**found);
    held = impl_->store->AcquireLease(lease, o.replica_id, o.lease_ms);
    if (!held.ok()) return build_here(false);
    if (*held) {  // the holder released or its lease lapsed
      if (auto r = recheck()) return *std::move(r);
      return build_here(true);
    }
  }
  return build_here(false);
}

}  // namespace gearbox
