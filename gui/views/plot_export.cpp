// PNG and SVG export of plot widgets.
#include "gui/views/plot_export.h"

#include <QGraphicsView>
#include <QImage>
#include <QPainter>

#include "foresight/gui_config.h"
#include "gui/models/export_format.h"

#if FORESIGHT_GUI_HAVE_SVG
#include <QSvgGenerator>
#endif

namespace foresight::gui {

namespace {

// Each plot at its place inside the bounding box of all of them.
struct Placed {
  QWidget* widget;
  QPoint offset;
};

void paint_plots(QPainter& p, const std::vector<Placed>& placed) {
  for (const Placed& x : placed) {
    p.save();
    p.translate(x.offset);
    p.setClipRect(QRect(QPoint(0, 0), x.widget->size()));
    if (auto* view = qobject_cast<QGraphicsView*>(x.widget)) {
      // A chart: render the scene itself (vector paths), not the widget's backing pixmap.
      const QRect source = view->viewport()->rect();
      view->render(&p, QRectF(QPointF(0, 0), QSizeF(source.size())), source);
    } else {
      x.widget->render(&p, QPoint(), QRegion(), QWidget::DrawWindowBackground | QWidget::DrawChildren);
    }
    p.restore();
  }
}

}  // namespace

Status export_plots(const std::vector<QWidget*>& plots, const QString& path) {
  FS_ASSIGN_OR_RETURN(ExportFormat format, export_format(path.toStdString()));
  if (plots.empty()) return Error("this view has no plot to export");
  QWidget* window = plots.front()->window();
  QRect bounds;
  std::vector<Placed> placed;
  for (QWidget* w : plots) {
    if (w->width() <= 0 || w->height() <= 0) continue;
    const QRect r(w->mapTo(window, QPoint(0, 0)), w->size());
    bounds = bounds.united(r);
    placed.push_back({w, r.topLeft()});
  }
  if (placed.empty()) return Error("the plots have no size yet (the view was never shown)");
  for (Placed& x : placed) x.offset -= bounds.topLeft();
  const std::string file = path.toStdString();

  if (format == ExportFormat::kPng) {
    QImage image(bounds.size(), QImage::Format_RGB32);
    image.fill(Qt::white);
    {
      QPainter p(&image);
      p.setRenderHint(QPainter::Antialiasing);
      paint_plots(p, placed);
    }
    if (!image.save(path, "PNG")) return Error(file + ": cannot write the PNG");
    return Status::Ok();
  }
#if FORESIGHT_GUI_HAVE_SVG
  QSvgGenerator svg;
  svg.setFileName(path);
  svg.setSize(bounds.size());
  svg.setViewBox(QRect(QPoint(0, 0), bounds.size()));
  svg.setTitle(QStringLiteral("Foresight"));
  QPainter p;
  if (!p.begin(&svg)) return Error(file + ": cannot write the SVG");
  paint_plots(p, placed);
  if (!p.end()) return Error(file + ": cannot write the SVG");
  return Status::Ok();
#else
  return Error(file + ": SVG export is not in this build");
#endif
}

}  // namespace foresight::gui
