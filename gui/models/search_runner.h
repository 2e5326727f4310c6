// Plan search off the GUI thread. `run_search` is the plain function (tests and the screenshot
// mode call it directly); SearchController runs it on its own QThread, reports progress, can be
// cancelled, and hands the finished SearchOutcome (a plain value) back by signal.
//
//   SearchController c;
//   connect(&c, &SearchController::progress, bar, ...);           // (done, total) candidates
//   connect(&c, &SearchController::finished, view, &View::show);  // a SearchOutcome
//   c.start(SearchRequest{"tiny", "cpu-local", 4, 8});
//   c.cancel();                                                   // finished() says cancelled
#pragma once

#include <QObject>
#include <QThread>
#include <atomic>
#include <cstdint>
#include <functional>
#include <memory>
#include <string>

#include "sim/search/search.h"

namespace foresight::gui {

struct SearchRequest {
  std::string model = "llama3-8b";       // preset name or file
  std::string cluster = "dgx-h100-ndr";  // preset name or file
  int gpus = 16;
  std::int64_t global_batch = 64;  // sequences per step
  Objective objective = Objective::kTime;
  int top_k = 50;                             // plans listed
  int resimulate = 5;                         // re-rank the best N with the discrete-event simulator
  double min_headroom = kDefaultMinHeadroom;  // share of the fullest device every plan leaves free
  unsigned threads = 0;                       // 0: all cores
};

struct SearchOutcome {
  SearchRequest request;
  std::string error;  // empty on success
  bool cancelled = false;
  SearchResult result;
  bool ok() const { return error.empty() && !cancelled; }
};

// Resolves the presets and searches. `cancel` (may be null) is polled whenever the search reports
// progress; once it is set the search stops and the outcome says cancelled. A search in which no
// plan fits is an error that lists the rejection reasons.
SearchOutcome run_search(const SearchRequest& request,
                         const std::function<void(std::uint64_t, std::uint64_t)>& progress = {},
                         const std::atomic<bool>* cancel = nullptr);

// Lives on SearchController's thread; use the controller.
class SearchWorker : public QObject {
  Q_OBJECT
 public:
  explicit SearchWorker(std::shared_ptr<const std::atomic<bool>> cancel) : cancel_(std::move(cancel)) {}

 public Q_SLOTS:
  void run(const foresight::gui::SearchRequest& request);

 Q_SIGNALS:
  void progress(quint64 done, quint64 total);
  void finished(const foresight::gui::SearchOutcome& outcome);

 private:
  std::shared_ptr<const std::atomic<bool>> cancel_;
};

class SearchController : public QObject {
  Q_OBJECT
 public:
  explicit SearchController(QObject* parent = nullptr);
  // Cancels a running search and waits for its thread.
  ~SearchController() override;

  // Starts a search; false (and nothing happens) while one is still running.
  bool start(const SearchRequest& request);
  // Asks the running search to stop; finished() follows with `cancelled` set.
  void cancel();
  bool running() const { return running_; }

 Q_SIGNALS:
  void progress(quint64 done, quint64 total);
  void finished(const foresight::gui::SearchOutcome& outcome);
  void run_requested(const foresight::gui::SearchRequest& request);  // internal: to the worker thread

 private:
  QThread thread_;
  std::shared_ptr<std::atomic<bool>> cancel_ = std::make_shared<std::atomic<bool>>(false);
  bool running_ = false;
};

}  // namespace foresight::gui

Q_DECLARE_METATYPE(foresight::gui::SearchRequest)
Q_DECLARE_METATYPE(foresight::gui::SearchOutcome)
