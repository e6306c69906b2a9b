// SPDX-License-Identifier: Apache-2.0
// Gives the precompiled-header target a translation unit of its own.
