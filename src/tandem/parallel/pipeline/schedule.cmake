# Pipeline schedules and their simulator; included by the parallel module's CMakeLists.txt.
tandem_module(parallel_schedule SOURCES ${CMAKE_CURRENT_LIST_DIR}/schedule.cc ${CMAKE_CURRENT_LIST_DIR}/simulator.cc DEPS tandem_spec)
