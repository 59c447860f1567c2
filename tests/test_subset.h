// Subsets of a parameterised test matrix. A ctest entry made by tandem_mpi_subset (tests/CMakeLists.txt) sets
// TANDEM_TEST_SUBSET to a subset's name; the matrix then holds only the cases that subset lists, and the ones it leaves
// out are named in the output (mpi_test_main.cc prints them). A listed case that the matrix does not hold, or a subset
// the matrix does not know, stops the binary before any test runs, so a renamed case cannot quietly shrink a subset.
#pragma once

#include <cstdio>
#include <cstdlib>
#include <map>
#include <string>
#include <vector>

namespace tandem::testing {

// The subset this process was asked for (TANDEM_TEST_SUBSET), or empty for the whole matrix.
std::string requested_subset();

// Records what `matrix` left out under the requested subset, for mpi_test_main.cc to print once MPI has started.
void note_left_out(const std::string& matrix, const std::vector<std::string>& names, size_t kept);

// The names noted so far, as "matrix: n of m cases run under subset S; left out: a, b, ..." lines.
std::vector<std::string> left_out_report();

// `all` when no subset is requested; otherwise the cases of `all` whose name_of(case) the requested subset lists in
// `subsets`, in the matrix's order. Exits with a message when the subset or a name in it is unknown.
template <class Case, class NameOf>
std::vector<Case> select_subset(const std::vector<Case>& all, NameOf name_of, const char* matrix,
                                const std::map<std::string, std::vector<std::string>>& subsets) {
  const std::string subset = requested_subset();
  if (subset.empty()) return all;
  const auto it = subsets.find(subset);
  if (it == subsets.end()) {
    std::fprintf(stderr, "TANDEM_TEST_SUBSET=%s: the matrix %s has no such subset\n", subset.c_str(), matrix);
    std::exit(2);
  }
  std::vector<bool> keep(all.size(), false);
  for (const std::string& name : it->second) {
    bool found = false;
    for (size_t i = 0; i < all.size(); ++i)
      if (name_of(all[i]) == name) keep[i] = found = true;
    if (!found) {
      std::fprintf(stderr, "subset %s of the matrix %s lists the case %s, which the matrix does not hold\n",
                   subset.c_str(), matrix, name.c_str());
      std::exit(2);
    }
  }
  std::vector<Case> kept;
  std::vector<std::string> left;
  for (size_t i = 0; i < all.size(); ++i) {
    if (keep[i])
      kept.push_back(all[i]);
    else
      left.push_back(name_of(all[i]));
  }
  note_left_out(matrix, left, kept.size());
  return kept;
}

}  // namespace tandem::testing
