// C = A + B over 96 x 64 fp16 matrices, on 32 compute tiles of 3 rows each, one row per loop
// iteration: the RFC's tile-parallel add, with the tensors' bases as arguments. Written with the
// RFC's memory-space spelling (#ktdp.spyre_memory_space<HBM>).
#rows = affine_set<(d0, d1) : (d0 >= 0, -d0 + 95 >= 0, d1 >= 0, -d1 + 63 >= 0)>
#row = affine_set<(d0, d1) : (d0 >= 0, -d0 >= 0, d1 >= 0, -d1 + 63 >= 0)>
#id2 = affine_map<(d0, d1) -> (d0, d1)>

module {
  func.func @add(%a: index, %b: index, %c: index) attributes {grid = [32]} {
    %c0 = arith.constant 0 : index
    %c1 = arith.constant 1 : index
    %tile_rows = arith.constant 3 : index
    %id = ktdp.get_compute_tile_id : index
    %first = arith.muli %id, %tile_rows : index

    %A = ktdp.construct_memory_view %a, sizes: [96, 64], strides: [64, 1] {
      coordinate_set = #rows, memory_space = #ktdp.spyre_memory_space<HBM>
    } : memref<96x64xf16>
    %B = ktdp.construct_memory_view %b, sizes: [96, 64], strides: [64, 1] {
      coordinate_set = #rows, memory_space = #ktdp.spyre_memory_space<HBM>
    } : memref<96x64xf16>
    %C = ktdp.construct_memory_view %c, sizes: [96, 64], strides: [64, 1] {
      coordinate_set = #rows, memory_space = #ktdp.spyre_memory_space<HBM>
    } : memref<96x64xf16>

    scf.for %i = %c0 to %tile_rows step %c1 {
      %at = ktdp.construct_access_tile %A[%first + %i, %c0] {
        access_tile_set = #row, access_tile_order = #id2
      } : memref<96x64xf16> -> !ktdp.access_tile<1x64xindex>
      %bt = ktdp.construct_access_tile %B[%first + %i, %c0] {
        access_tile_set = #row, access_tile_order = #id2
      } : memref<96x64xf16> -> !ktdp.access_tile<1x64xindex>
      %x = ktdp.load %at : !ktdp.access_tile<1x64xindex> -> tensor<1x64xf16>
      %y = ktdp.load %bt : !ktdp.access_tile<1x64xindex> -> tensor<1x64xf16>
      %e = tensor.empty() : tensor<1x64xf16>
      %s = linalg.add ins(%x, %y : tensor<1x64xf16>, tensor<1x64xf16>)
                      outs(%e : tensor<1x64xf16>) -> tensor<1x64xf16>
      %ct = ktdp.construct_access_tile %C[%first + %i, %c0] {
        access_tile_set = #row, access_tile_order = #id2
      } : memref<96x64xf16> -> !ktdp.access_tile<1x64xindex>
      ktdp.store %s, %ct : tensor<1x64xf16>, !ktdp.access_tile<1x64xindex>
    }
    return
  }
}
