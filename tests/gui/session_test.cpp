// Sessions: save and reopen (file, then the whole window), relative paths, and bad files, each
// refused with the file, the JSON pointer of the field and the reason.
#include "gui/models/session.h"

#include <gtest/gtest.h>

#include <QFile>
#include <QFileInfo>
#include <QSignalSpy>
#include <QTemporaryDir>
#include <fstream>

#include "gui/models/format.h"
#include "gui/models/timeline_model.h"
#include "gui/models/traces.h"
#include "gui/views/main_window.h"
#include "gui/views/setup_view.h"
#include "gui/views/timeline_view.h"

namespace foresight::gui {
namespace {

std::string write_text(const QTemporaryDir& dir, const QString& name, const std::string& text) {
  const std::string path = dir.filePath(name).toStdString();
  std::ofstream(path) << text;
  return path;
}

PlanInputs tiny_inputs() {
  PlanInputs in;
  in.model = "tiny";
  in.cluster = "cpu-local";
  in.plan.tp = 2;
  in.plan.dp = 2;
  in.plan.global_batch = 4;
  return in;
}

TEST(Session, RoundTripsThroughAFile) {
  QTemporaryDir dir;
  ASSERT_TRUE(dir.isValid());
  auto traces = write_example_traces(tiny_inputs(), dir.path().toStdString());
  ASSERT_TRUE(traces.ok()) << traces.error().message();
  Session s;
  s.inputs = example_inputs();
  Plan& p = s.inputs.plan;
  p.schedule = Schedule::kZeroBubble;
  p.recompute = Recompute::kFull;
  p.precision = Precision::kFp16;
  p.micro_batch = 2;
  p.seq_len = 4096;
  p.overlap_grad_reduce = true;
  s.trace = traces->measured;
  s.predicted = traces->predicted;
  s.measured = traces->measured;
  s.sweep = write_text(dir, QStringLiteral("sweep.json"), "{}");  // only its existence is checked here
  s.view = View::kTopology;
  const std::string path = dir.filePath(QStringLiteral("run.session.json")).toStdString();
  ASSERT_TRUE(save_session(s, path).ok());
  EXPECT_TRUE(is_session_file(path));
  EXPECT_FALSE(is_session_file(traces->predicted));
  auto back = load_session(path);
  ASSERT_TRUE(back.ok()) << back.error().message();
  EXPECT_EQ(*back, s);
  EXPECT_EQ(session_to_json(*back), session_to_json(s));
}

TEST(Session, RelativePathsAreRelativeToTheSessionsFolder) {
  QTemporaryDir dir;
  ASSERT_TRUE(dir.isValid());
  const std::string trace = write_text(dir, QStringLiteral("step.json"), "{}");
  const std::string path =
      write_text(dir, QStringLiteral("s.json"), R"({"foresight_session": 1, "model": "tiny",
      "cluster": "cpu-local", "plan": {"global_batch": 4}, "files": {"trace": "step.json"}})");
  auto s = load_session(path);
  ASSERT_TRUE(s.ok()) << s.error().message();
  EXPECT_EQ(s->trace, trace);
  EXPECT_EQ(s->view, View::kSetup);  // the default
  EXPECT_EQ(s->inputs.plan.global_batch, 4);
  EXPECT_EQ(s->inputs.plan.tp, 1);
}

// Long by its table, not its logic: one row per bad session file (the text and the message it must
// give), then a loop that loads each.
TEST(Session, BadFilesNameTheFieldAndTheReason) {
  QTemporaryDir dir;
  ASSERT_TRUE(dir.isValid());
  const std::string head = R"("foresight_session": 1, "model": "llama3-8b", "cluster": "dgx-h100-ndr", )";
  const std::string plan = R"("plan": {"global_batch": 64})";
  const std::string d = dir.path().toStdString();
  const struct {
    const char* what;
    std::string text;
    std::string message;  // after "<path>: "
  } cases[] = {
      {"plan field", "{" + head + R"("plan": {"tp": "two", "global_batch": 64}})",
       "/plan/tp: expected an integer, got string \"two\""},
      {"no plan", "{" + head.substr(0, head.size() - 2) + "}", "/plan: missing required field"},
      {"plan not an object", "{" + head + R"("plan": [1]})",
       "/plan: expected an object (a plan as in plan.json)"},
      {"unknown model",
       R"({"foresight_session": 1, "model": "gpt-9", "cluster": "dgx-h100-ndr", )" + plan + "}",
       "/model: \"gpt-9\" is neither a built-in model preset (`foresight presets` prints them) nor a file"},
      {"no cluster", R"({"foresight_session": 1, "model": "tiny", )" + plan + "}",
       "/cluster: missing required field"},
      {"bad view", "{" + head + plan + R"(, "view": "gantt"})",
       "/view: \"gantt\" is not one of: setup, details, search, timeline, compare, sweep, topology"},
      {"missing trace", "{" + head + plan + R"(, "files": {"trace": "gone.json"}})",
       "/files/trace: no such file: " + d + "/gone.json"},
      {"half a comparison", "{" + head + plan + R"(, "files": {"predicted": "bad.json"}})",
       "/files/measured: missing: Compare needs both a predicted and a measured trace"},
      {"newer version", R"({"foresight_session": 2, "model": "tiny", "cluster": "cpu-local", )" + plan + "}",
       "/foresight_session: version 2 is not supported (this build reads 1)"},
      {"unknown field", "{" + head + plan + R"(, "colour": "blue"})",
       "/colour: unknown field (known fields: foresight_session, model, cluster, plan, files, view)"},
      {"not an object", "[1, 2]", "/: expected an object, got array of 2 elements"},
  };
  for (const auto& c : cases) {
    const std::string path = write_text(dir, QStringLiteral("bad.json"), c.text);
    auto s = load_session(path);
    ASSERT_FALSE(s.ok()) << c.what;
    EXPECT_EQ(s.error().message(), path + ": " + c.message) << c.what;
  }
  // Not JSON: the parser's message with the file name.
  const std::string path = write_text(dir, QStringLiteral("broken.json"), "{\"model\": ");
  auto s = load_session(path);
  ASSERT_FALSE(s.ok());
  EXPECT_EQ(s.error().message().rfind(path + ":", 0), 0u) << s.error().message();
  EXPECT_FALSE(load_session(d + "/absent.json").ok());
}

// The window: what it saves (and leaves out), and a reopened session in a new window.
TEST(Session, WindowSavesAndReopens) {
  QTemporaryDir dir;
  ASSERT_TRUE(dir.isValid());
  auto traces = write_example_traces(tiny_inputs(), dir.path().toStdString());
  ASSERT_TRUE(traces.ok()) << traces.error().message();
  const QString path = dir.filePath(QStringLiteral("window.session.json"));
  {
    MainWindow w;
    w.set_inputs(tiny_inputs());
    ASSERT_TRUE(w.evaluation().ok()) << w.evaluation().error;
    // A trace simulated into the window's scratch folder is not saved: it goes with the window.
    QSignalSpy loaded(w.timeline(), &TimelineView::loaded);
    Q_EMIT w.setup()->simulate_requested();
    ASSERT_TRUE(loaded.wait(10000));
    EXPECT_EQ(w.session().trace, "");
    // A file the user opened is.
    w.timeline()->open_file(qstr(traces->measured));
    ASSERT_TRUE(loaded.wait(10000));
    w.show_view(View::kTopology);
    ASSERT_TRUE(w.save_session(path).ok());
  }
  MainWindow w;
  w.set_inputs(example_inputs());
  QSignalSpy loaded(w.timeline(), &TimelineView::loaded);
  const Status s = w.open_session(path);
  ASSERT_TRUE(s.ok()) << s.error().message();
  EXPECT_EQ(w.evaluation().inputs, tiny_inputs());
  EXPECT_EQ(w.current_view(), View::kTopology);
  ASSERT_TRUE(loaded.wait(10000));
  EXPECT_EQ(w.timeline()->model()->timeline().file,
            QFileInfo(qstr(traces->measured)).canonicalFilePath().toStdString());

  // A bad session changes nothing and says why.
  const std::string bad = write_text(dir, QStringLiteral("bad.json"), R"({"foresight_session": 1})");
  const Status refused = w.open_session(qstr(bad));
  ASSERT_FALSE(refused.ok());
  EXPECT_EQ(refused.error().message(), bad + ": /model: missing required field");
  EXPECT_EQ(w.evaluation().inputs, tiny_inputs());
}

// Setup takes files as well as presets: a Hugging Face config.json, a cluster JSON and a plan
// JSON; a bad file names itself and changes nothing; a session keeps the files it names.
TEST(SetupFiles, ModelClusterAndPlanFromFiles) {
  QTemporaryDir dir;
  ASSERT_TRUE(dir.isValid());
  const std::string d = dir.path().toStdString();
  auto write = [&](const std::string& name, const std::string& text) {
    std::ofstream(d + "/" + name) << text;
    return d + "/" + name;
  };
  const std::string model = write("config.json", R"({"model_type": "llama", "hidden_size": 1024,
      "intermediate_size": 4096, "num_hidden_layers": 8, "num_attention_heads": 16, "num_key_value_heads": 4,
      "vocab_size": 32000, "max_position_embeddings": 2048})");
  const std::string plan =
      write("plan.json", R"({"tp": 2, "pp": 2, "dp": 2, "global_batch": 32, "zero_stage": 1,
      "grad_compression": "int8", "offload_optimizer": true, "offload_params": true, "kernel_fusion": false,
      "data": {"compression": "lz4", "prefetch": 0}})");
  const std::string bad = write("bad.json", R"({"tp": "two", "global_batch": 32})");
  SetupView v;
  ASSERT_TRUE(v.open_model_file(model).ok());
  EXPECT_EQ(v.inputs().model, model);
  ASSERT_TRUE(v.open_plan_file(plan).ok());
  EXPECT_EQ(v.inputs().plan.tp, 2);
  EXPECT_EQ(v.inputs().plan.pp, 2);
  EXPECT_EQ(v.inputs().plan.global_batch, 32);
  // Fields with a widget come back from it, the others from the plan file.
  EXPECT_TRUE(v.inputs().plan.offload_params);
  EXPECT_FALSE(v.inputs().plan.kernel_fusion);
  EXPECT_EQ(v.inputs().plan.grad_compression, GradCompression::kInt8);
  EXPECT_EQ(v.inputs().plan.data.compression, "lz4");
  EXPECT_EQ(v.inputs().plan.data.prefetch, 0);
  const Evaluation e = evaluate_plan(v.inputs());
  EXPECT_TRUE(e.ok()) << e.error;
  EXPECT_EQ(e.model.layers, 8);
  Status s = v.open_plan_file(bad);
  ASSERT_FALSE(s.ok());
  EXPECT_NE(s.error().message().find("bad.json: /tp: expected an integer"), std::string::npos)
      << s.error().message();
  EXPECT_NE(v.status_text().toStdString().find("bad.json"), std::string::npos);
  EXPECT_EQ(v.inputs().plan.tp, 2);  // unchanged
  EXPECT_FALSE(v.open_cluster_file(d + "/missing.json").ok());
  // A session naming the model file reopens with it.
  Session saved;
  saved.inputs = v.inputs();
  const std::string path = d + "/s.session.json";
  ASSERT_TRUE(save_session(saved, path).ok());
  auto back = load_session(path);
  ASSERT_TRUE(back.ok()) << back.error().message();
  EXPECT_EQ(back->inputs.model, model);
  SetupView again;
  again.set_inputs(back->inputs);
  EXPECT_EQ(again.inputs().model, model);
}

}  // namespace
}  // namespace foresight::gui
