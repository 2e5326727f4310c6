// Shared look of the views' tables: compact rows, no row numbers, read-only.
#pragma once

#include <QHeaderView>
#include <QTableView>

namespace foresight::gui {

inline void make_compact(QTableView* t) {
  t->verticalHeader()->hide();
  t->verticalHeader()->setSectionResizeMode(QHeaderView::Fixed);  // also keeps big traces fast
  t->verticalHeader()->setDefaultSectionSize(t->fontMetrics().height() + 6);
  t->setEditTriggers(QAbstractItemView::NoEditTriggers);
  t->setWordWrap(false);
  t->setAlternatingRowColors(true);
}

}  // namespace foresight::gui
