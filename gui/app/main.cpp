// foresight-gui: the desktop GUI.
//
//   foresight-gui [TRACE.json | SESSION.json] [--sweep SPEC.json|results.jsonl|results.csv] [--predicted
//   P.json --measured M.json]
//       open the window; a trace opens in Timeline, a sweep spec in Sweep, two traces in Compare,
//       a session (File > Save session) restores the Setup, its files and its view
//   foresight-gui --screenshot out.png --view details [SESSION.json]
//       render one view of the built-in example (or of the files or session given as above)
//       off-screen to a PNG and exit; with a session, --view defaults to the session's view
//   foresight-gui --export plot.svg --view timeline [files or SESSION.json]
//       the same, but only the view's plots (charts, Gantt, topology), as PNG or SVG
#include <QApplication>
#include <QCommandLineParser>
#include <QRegularExpression>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <optional>

#include "gui/models/plan_inputs.h"
#include "gui/models/session.h"
#include "gui/views/compare_view.h"
#include "gui/views/main_window.h"
#include "gui/views/screenshot.h"
#include "gui/views/sweep_view.h"
#include "gui/views/timeline_view.h"

namespace {

// --screenshot, --help and --version need no display: use the off-screen platform for them
// unless the user chose one.
void use_offscreen_when_no_window(int argc, char** argv) {
  for (int i = 1; i < argc; ++i)
    for (const char* flag : {"--screenshot", "--export", "--help", "-h", "--help-all", "--version", "-v"})
      if (std::strcmp(argv[i], flag) == 0 && qEnvironmentVariableIsEmpty("QT_QPA_PLATFORM"))
        qputenv("QT_QPA_PLATFORM", "offscreen");
}

// The command line's options.
struct Options {
  const QCommandLineOption screenshot{
      QStringLiteral("screenshot"), QStringLiteral("render a view of the built-in example to a PNG and exit"),
      QStringLiteral("FILE")};
  const QCommandLineOption export_plot{
      QStringLiteral("export"), QStringLiteral("write the plots of a view to a .png or .svg file and exit"),
      QStringLiteral("FILE")};
  const QCommandLineOption view{
      QStringLiteral("view"),
      QStringLiteral(
          "view for --screenshot and --export: setup, details, search, timeline, compare, sweep, topology"),
      QStringLiteral("NAME"), QStringLiteral("setup")};
  const QCommandLineOption size{QStringLiteral("size"),
                                QStringLiteral("window size for --screenshot and --export"),
                                QStringLiteral("WxH"), QStringLiteral("1200x800")};
  const QCommandLineOption sweep{
      QStringLiteral("sweep"),
      QStringLiteral(
          "a sweep spec, or a results.jsonl or results.csv of foresight sweep, to open in the Sweep view"),
      QStringLiteral("SPEC")};
  const QCommandLineOption predicted{
      QStringLiteral("predicted"),
      QStringLiteral("predicted trace for the Compare view (foresight simulate --trace)"),
      QStringLiteral("FILE")};
  const QCommandLineOption measured{
      QStringLiteral("measured"),
      QStringLiteral("measured trace for the Compare view (foresight run --trace)"), QStringLiteral("FILE")};

  void add_to(QCommandLineParser& cli) const {
    cli.setApplicationDescription(
        QStringLiteral("Foresight: plan, predict and compare LLM training layouts."));
    cli.addHelpOption();
    cli.addVersionOption();
    for (const QCommandLineOption* o :
         {&screenshot, &export_plot, &sweep, &predicted, &measured, &view, &size})
      cli.addOption(*o);
    cli.addPositionalArgument(
        QStringLiteral("file"),
        QStringLiteral("a Chrome trace to open in the Timeline view, or a saved session"),
        QStringLiteral("[trace.json | session.json]"));
  }
};

// What the command line opens: a session (its files) or a trace, then the files named by
// options, which override the session's. An unreadable session is an error.
foresight::Status read_files(const QCommandLineParser& cli, const Options& o,
                             foresight::gui::ViewFiles& files,
                             std::optional<foresight::gui::Session>& session) {
  if (!cli.positionalArguments().isEmpty()) {
    const QString arg = cli.positionalArguments().front();
    if (foresight::gui::is_session_file(arg.toStdString())) {
      FS_ASSIGN_OR_RETURN(foresight::gui::Session s, foresight::gui::load_session(arg.toStdString()));
      files.inputs = s.inputs;
      files.trace = QString::fromStdString(s.trace);
      files.predicted = QString::fromStdString(s.predicted);
      files.measured = QString::fromStdString(s.measured);
      files.sweep = QString::fromStdString(s.sweep);
      session = std::move(s);
    } else {
      files.trace = arg;
    }
  }
  if (cli.isSet(o.predicted)) files.predicted = cli.value(o.predicted);
  if (cli.isSet(o.measured)) files.measured = cli.value(o.measured);
  if (cli.isSet(o.sweep)) files.sweep = cli.value(o.sweep);
  return foresight::Status::Ok();
}

// --screenshot and --export: one view rendered off-screen; the exit status.
int render_offscreen(const QCommandLineParser& cli, const Options& o, const foresight::gui::ViewFiles& files,
                     const std::optional<foresight::gui::Session>& session) {
  const auto v = session && !cli.isSet(o.view) ? std::optional(session->view)
                                               : foresight::gui::parse_view(cli.value(o.view));
  if (!v) {
    std::fprintf(
        stderr,
        "error: --view: \"%s\" is not one of setup, details, search, timeline, compare, sweep, topology\n",
        qPrintable(cli.value(o.view)));
    return 2;
  }
  const auto m = QRegularExpression(QStringLiteral("^(\\d+)x(\\d+)$")).match(cli.value(o.size));
  const int w = m.hasMatch() ? m.captured(1).toInt() : 0, h = m.hasMatch() ? m.captured(2).toInt() : 0;
  if (w < 200 || h < 150 || w > 8000 || h > 8000) {
    std::fprintf(stderr, "error: --size: \"%s\" is not WIDTHxHEIGHT between 200x150 and 8000x8000\n",
                 qPrintable(cli.value(o.size)));
    return 2;
  }
  foresight::Status s;
  if (cli.isSet(o.screenshot))
    s = foresight::gui::render_screenshot(*v, cli.value(o.screenshot), QSize(w, h), files);
  if (s && cli.isSet(o.export_plot))
    s = foresight::gui::render_plots(*v, cli.value(o.export_plot), QSize(w, h), files);
  if (!s) {
    std::fprintf(stderr, "error: %s\n", s.error().message().c_str());
    return 2;
  }
  return 0;
}

// The window with the built-in example, then the session or the files of the command line.
int run_window(const QCommandLineParser& cli, const Options& o, const foresight::gui::ViewFiles& files,
               bool has_session) {
  foresight::gui::MainWindow window;
  window.resize(1280, 860);
  window.set_inputs(foresight::gui::example_inputs());
  if (has_session) {
    if (const foresight::Status s = window.open_session(cli.positionalArguments().front()); !s) {
      std::fprintf(stderr, "error: %s\n", s.error().message().c_str());
      return 2;
    }
  } else if (!files.trace.isEmpty()) {
    window.timeline()->open_file(files.trace);
    window.show_view(foresight::gui::View::kTimeline);
  }
  // Files named on the command line override the session's.
  if (cli.isSet(o.predicted) || cli.isSet(o.measured)) {
    window.compare()->set_files(files.predicted, files.measured);
    window.compare()->compare();
    window.show_view(foresight::gui::View::kCompare);
  }
  if (cli.isSet(o.sweep)) {
    window.sweep()->open_file(files.sweep);
    window.show_view(foresight::gui::View::kSweep);
  }
  window.show();
  return QApplication::exec();
}

}  // namespace

int main(int argc, char** argv) {
  use_offscreen_when_no_window(argc, argv);
  QApplication app(argc, argv);
  QApplication::setApplicationName(QStringLiteral("foresight-gui"));
  QApplication::setApplicationVersion(QStringLiteral("0.1.0"));

  QCommandLineParser cli;
  const Options options;
  options.add_to(cli);
  cli.process(app);
  foresight::gui::ViewFiles files;
  std::optional<foresight::gui::Session> session;
  if (const foresight::Status s = read_files(cli, options, files, session); !s) {
    std::fprintf(stderr, "error: %s\n", s.error().message().c_str());
    return 2;
  }
  if (cli.isSet(options.screenshot) || cli.isSet(options.export_plot))
    return render_offscreen(cli, options, files, session);
  return run_window(cli, options, files, session.has_value());
}
