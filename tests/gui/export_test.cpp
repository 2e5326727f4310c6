// Plot export: every view with a plot writes a valid PNG (the PNG signature, readable at the
// plots' size) and a valid SVG (well-formed XML whose root element is <svg>, with drawing in it);
// a view without plots and an unknown suffix are refused with the reason.
#include <gtest/gtest.h>

#include <QApplication>
#include <QFile>
#include <QImage>
#include <QTemporaryDir>
#include <QXmlStreamReader>

#include "gui/models/export_format.h"
#include "gui/views/main_window.h"
#include "gui/views/screenshot.h"

namespace foresight::gui {

void PrintTo(View v, std::ostream* os);

namespace {

// The root element's name, or the XML error; counts the elements below it.
struct SvgCheck {
  QString root, error;
  int elements = 0, texts = 0, images = 0;
};
SvgCheck read_svg(const QString& path) {
  QFile f(path);
  SvgCheck out;
  if (!f.open(QIODevice::ReadOnly)) {
    out.error = QStringLiteral("cannot open");
    return out;
  }
  QXmlStreamReader xml(&f);
  while (!xml.atEnd()) {
    if (xml.readNext() == QXmlStreamReader::StartElement) {
      if (out.root.isEmpty()) out.root = xml.name().toString();
      ++out.elements;
      out.texts += xml.name() == QLatin1String("text");
      out.images += xml.name() == QLatin1String("image");
    }
  }
  if (xml.hasError()) out.error = xml.errorString();
  return out;
}

class ExportTest : public ::testing::TestWithParam<View> {};

TEST_P(ExportTest, WritesPngAndSvg) {
  QTemporaryDir dir;
  ASSERT_TRUE(dir.isValid());
  MainWindow w;
  w.resize(1200, 800);
  const Status loaded = load_example(w, GetParam());
  ASSERT_TRUE(loaded.ok()) << loaded.error().message();
  w.show();
  for (int i = 0; i < 3; ++i) QApplication::processEvents();
  ASSERT_FALSE(w.plots(GetParam()).empty());

  const QString png = dir.filePath(QStringLiteral("plot.png"));
  const Status p = w.export_current(png);
  ASSERT_TRUE(p.ok()) << p.error().message();
  QFile f(png);
  ASSERT_TRUE(f.open(QIODevice::ReadOnly));
  EXPECT_EQ(f.read(8), QByteArray("\x89PNG\r\n\x1a\n", 8));
  const QImage image(png);
  ASSERT_FALSE(image.isNull());
  // At least as big as the largest plot, at most the window.
  for (QWidget* plot : w.plots(GetParam())) {
    EXPECT_GE(image.width(), plot->width());
    EXPECT_GE(image.height(), plot->height());
  }
  EXPECT_LE(image.width(), 1200);
  EXPECT_LE(image.height(), 800);

  if (!svg_export_available()) GTEST_SKIP() << "built without Qt SVG";
  const QString svg = dir.filePath(QStringLiteral("plot.svg"));
  const Status s = w.export_current(svg);
  ASSERT_TRUE(s.ok()) << s.error().message();
  const SvgCheck check = read_svg(svg);
  EXPECT_TRUE(check.error.isEmpty()) << check.error.toStdString();
  EXPECT_EQ(check.root, QStringLiteral("svg"));
  EXPECT_GT(check.elements, 20);  // paths and text, not an empty canvas
  EXPECT_GT(check.texts, 0);      // labels as text
  EXPECT_EQ(check.images, 0);     // vectors, not an embedded screenshot
}

INSTANTIATE_TEST_SUITE_P(PlotViews, ExportTest,
                         ::testing::Values(View::kDetails, View::kSearch, View::kTimeline, View::kCompare,
                                           View::kSweep, View::kTopology),
                         [](const auto& param) { return view_name(param.param).toStdString(); });

TEST(Export, RefusesWhatItCannotWrite) {
  QTemporaryDir dir;
  ASSERT_TRUE(dir.isValid());
  MainWindow w;
  w.set_inputs(example_inputs());
  w.show_view(View::kSetup);
  const Status none = w.export_current(dir.filePath(QStringLiteral("setup.png")));
  ASSERT_FALSE(none.ok());
  EXPECT_EQ(none.error().message(), "setup: this view has no plot to export");

  auto jpg = export_format("plot.JPG");
  ASSERT_FALSE(jpg.ok());
  EXPECT_EQ(jpg.error().message(), "plot.JPG: cannot tell the format from \".jpg\"; use .png or .svg");
  EXPECT_EQ(export_format("a/b.PNG").value(), ExportFormat::kPng);
  EXPECT_EQ(export_format("a.svg").ok(), svg_export_available());
}

}  // namespace
}  // namespace foresight::gui
