// Embedding lookup: out[r, :] = table[idx[r], :] for 256 int64 indices into a 1000 x 64 fp32
// table, on 32 compute tiles of 8 rows each, through an indirect access tile whose first
// coordinate comes from the index view (a GATHER: the DMA engine checks each index against the
// table's 1000 rows).
#rows8 = affine_set<(d0, d1) : (d0 >= 0, -d0 + 7 >= 0, d1 >= 0, -d1 + 63 >= 0)>
#space = affine_set<(d0, d1) : (d0 >= 0, -d0 + 7 >= 0, d1 >= 0, -d1 + 63 >= 0)>

module {
  func.func @embedding(%table: index, %idx: index, %out: index) attributes {grid = [32]} {
    %c0 = arith.constant 0 : index
    %c8 = arith.constant 8 : index
    %id = ktdp.get_compute_tile_id : index
    %first = arith.muli %id, %c8 : index

    %T = ktdp.construct_memory_view %table, sizes: [1000, 64], strides: [64, 1] {
      coordinate_set = affine_set<(d0, d1) : (d0 >= 0, -d0 + 999 >= 0, d1 >= 0, -d1 + 63 >= 0)>,
      memory_space = #ktdp.memory_space<global>
    } : memref<1000x64xf32>
    %I = ktdp.construct_memory_view %idx, sizes: [256], strides: [1] {
      coordinate_set = affine_set<(d0) : (d0 >= 0, -d0 + 255 >= 0)>,
      memory_space = #ktdp.memory_space<global>
    } : memref<256xi64>
    %O = ktdp.construct_memory_view %out, sizes: [256, 64], strides: [64, 1] {
      coordinate_set = affine_set<(d0, d1) : (d0 >= 0, -d0 + 255 >= 0, d1 >= 0, -d1 + 63 >= 0)>,
      memory_space = #ktdp.memory_space<global>
    } : memref<256x64xf32>

    %rows = ktdp.construct_indirect_access_tile intermediate_variables(%m, %k) %T[%I[%first + %m], %k] {
      variables_space_set = #space,
      variables_space_order = affine_map<(d0, d1) -> (d0, d1)>
    } : memref<1000x64xf32>, memref<256xi64> -> !ktdp.access_tile<8x64xindex>
    %x = ktdp.load %rows : !ktdp.access_tile<8x64xindex> -> tensor<8x64xf32>

    %ot = ktdp.construct_access_tile %O[%first, %c0] {access_tile_set = #rows8}
        : memref<256x64xf32> -> !ktdp.access_tile<8x64xindex>
    ktdp.store %x, %ot : tensor<8x64xf32>, !ktdp.access_tile<8x64xindex>
    return
  }
}
