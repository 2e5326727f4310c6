// QAbstractItemModelTester for GoogleTest: the tester runs in Warning mode and its complaints
// (logged under "qt.modeltest") are collected, so a broken model fails the test with the reason
// instead of aborting the run.
//
//   ModelCheck check(&model);   // attach before changing the model
//   model.set_...(...);
//   EXPECT_TRUE(check.ok()) << check.report();
#pragma once

#include <QAbstractItemModel>
#include <QAbstractItemModelTester>
#include <QStringList>
#include <cstring>
#include <memory>
#include <string>

namespace foresight::gui::test {

class ModelCheck {
 public:
  explicit ModelCheck(QAbstractItemModel* model) {
    messages().clear();
    previous_ = qInstallMessageHandler(&ModelCheck::handle);
    tester_ = std::make_unique<QAbstractItemModelTester>(
        model, QAbstractItemModelTester::FailureReportingMode::Warning);
  }
  ~ModelCheck() {
    tester_.reset();
    qInstallMessageHandler(previous_);
  }
  ModelCheck(const ModelCheck&) = delete;
  ModelCheck& operator=(const ModelCheck&) = delete;

  bool ok() const { return messages().isEmpty(); }
  std::string report() const { return messages().join(QLatin1Char('\n')).toStdString(); }

 private:
  static QStringList& messages() {
    static QStringList m;
    return m;
  }
  static void handle(QtMsgType, const QMessageLogContext& context, const QString& message) {
    if (context.category && std::strcmp(context.category, "qt.modeltest") == 0) messages().append(message);
  }

  QtMessageHandler previous_ = nullptr;
  std::unique_ptr<QAbstractItemModelTester> tester_;
};

}  // namespace foresight::gui::test
